"""`Trainer`: train, evaluate and predict with a GPT, T5 or ViT in a few lines (MindFormers' names).

    trainer = Trainer(GPTConfig(vocab_size=65), args=TrainingArguments(num_train_epochs=2),
                      train_dataset={"input_ids": x, "labels": y}, eval_dataset={...}, tokenizer=tok)
    trainer.train()                 # -> {"step_loss": [...], "loss": last}
    trainer.evaluate()              # -> {"eval_loss": ..., "perplexity": ...} ({"eval_accuracy"} for ViT)
    trainer.predict("ROMEO:")       # GPT: generated text (ids in, ids out without a tokenizer)

Datasets are dicts of numpy arrays (one row per example) or mstrain datasets whose columns are,
in order: GPT input_ids, labels; T5 source, decoder_input, labels; ViT image, label.
Training goes through `Model` (sink mode when `args.sink_size` > 0) with AdamW on the nanoGPT rule
(weight decay on matrices and embeddings only).
"""
from dataclasses import dataclass

import numpy as np

import mstrain as ms
from mstrain import Model, Tensor, nn
from mstrain import dataset as ds
from mstrain.train.callback import History

from .gpt import GPT, GPTConfig, GPTLoss
from .t5 import T5, T5Config, T5WithLoss
from .vit import ViT, ViTConfig

__all__ = ["Trainer", "TrainingArguments"]


@dataclass
class TrainingArguments:
    """Hyper-parameters of `Trainer` (Hugging Face / MindFormers spellings)."""
    output_dir: str = "outputs/trainer"
    num_train_epochs: int = 1
    per_device_train_batch_size: int = 16
    per_device_eval_batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-8
    seed: int = 0
    sink_size: int = 0               # > 0: steps per compiled sink (Model's dataset_sink_mode)
    max_new_tokens: int = 64         # predict() for GPT and T5


def _build_model(model_or_config):
    if isinstance(model_or_config, GPTConfig):
        return GPT(model_or_config)
    if isinstance(model_or_config, T5Config):
        return T5(model_or_config)
    if isinstance(model_or_config, ViTConfig):
        return ViT(model_or_config)
    if isinstance(model_or_config, (GPT, T5, ViT)):
        return model_or_config
    raise TypeError(f"Trainer: expected a GPT, T5 or ViT (or its config), got {type(model_or_config).__name__}")


class _WithLoss(nn.Cell):
    """(inputs..., labels) -> loss for the model kinds whose network takes one input."""

    def __init__(self, network, loss_fn):
        super().__init__(auto_prefix=False)
        self.network, self.loss_fn = network, loss_fn

    def construct(self, inputs, labels):
        return self.loss_fn(self.network(inputs), labels)


class Trainer:
    """See the module docstring."""

    def __init__(self, model, args=None, train_dataset=None, eval_dataset=None, tokenizer=None):
        self.args = args or TrainingArguments()
        ms.set_seed(self.args.seed)
        self.model = _build_model(model)
        self.train_dataset, self.eval_dataset, self.tokenizer = train_dataset, eval_dataset, tokenizer
        if isinstance(self.model, GPT):
            self.loss_cell = _WithLoss(self.model, GPTLoss(self.model))
        elif isinstance(self.model, T5):
            self.loss_cell = T5WithLoss(self.model)
        else:
            self.loss_cell = _WithLoss(self.model, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        self._optimizer = None
        self._engine = None  # the Model of train(), built with the optimizer on the first call

    def _dataset(self, data, batch, shuffle):
        if data is None:
            raise ValueError("Trainer: no dataset given")
        if isinstance(data, dict):
            return ds.NumpySlicesDataset(data, shuffle=shuffle, num_shards=1, shard_id=0).batch(batch)
        return data

    def _optimizer_for(self, steps):
        a = self.args
        params = self.model.trainable_params()
        groups = [{"params": [p for p in params if len(p.shape) >= 2], "weight_decay": a.weight_decay},
                  {"params": [p for p in params if len(p.shape) < 2], "weight_decay": 0.0}]
        return nn.AdamWeightDecay(groups, learning_rate=a.learning_rate, beta1=a.adam_beta1, beta2=a.adam_beta2,
                                  eps=a.adam_epsilon)

    def train(self):
        """Train for args.num_train_epochs; returns {"step_loss": [...], "loss": the last}."""
        a = self.args
        data = self._dataset(self.train_dataset, a.per_device_train_batch_size, shuffle=False)
        if self._optimizer is None:
            self._optimizer = self._optimizer_for(a.num_train_epochs * data.get_dataset_size())
        history = History()
        if self._engine is None:  # one Model: a second train() reuses its compiled step
            self._engine = Model(self.loss_cell, optimizer=self._optimizer)
        model = self._engine
        if a.sink_size > 0:
            epochs = a.num_train_epochs * data.get_dataset_size() // a.sink_size
            model.train(epochs, data, callbacks=[history], dataset_sink_mode=True, sink_size=a.sink_size)
        else:
            model.train(a.num_train_epochs, data, callbacks=[history])
        losses = [float(v) for v in history.step_loss]
        return {"step_loss": losses, "loss": losses[-1] if losses else None}

    def evaluate(self, eval_dataset=None):
        """Mean loss over the dataset (and perplexity; accuracy for ViT)."""
        data = self._dataset(eval_dataset if eval_dataset is not None else self.eval_dataset,
                             self.args.per_device_eval_batch_size, shuffle=False)
        self.model.set_train(False)
        total, count, correct = 0.0, 0, 0
        with ms.no_grad():
            for row in data.create_tuple_iterator():
                rows = len(np.asarray(row[0].asnumpy() if hasattr(row[0], "asnumpy") else row[0]))
                total += float(self.loss_cell(*row).asnumpy()) * rows
                count += rows
                if isinstance(self.model, ViT):
                    labels = row[1].asnumpy() if hasattr(row[1], "asnumpy") else np.asarray(row[1])
                    correct += int((self.model(row[0]).asnumpy().argmax(-1) == labels).sum())
        self.model.set_train(True)
        loss = total / count
        if isinstance(self.model, ViT):
            return {"eval_loss": loss, "eval_accuracy": correct / count}
        return {"eval_loss": loss, "perplexity": float(np.exp(loss))}

    def predict(self, inputs, **generate_kwargs):
        """GPT/T5: generate (text in and out with a tokenizer); ViT: predicted classes."""
        if isinstance(self.model, ViT):
            with ms.no_grad():
                return self.model(Tensor(np.asarray(inputs, np.float32))).asnumpy().argmax(-1)
        options = {"max_new_tokens": self.args.max_new_tokens, **generate_kwargs}
        if isinstance(inputs, str):
            if self.tokenizer is None:
                raise ValueError("Trainer.predict: text input needs Trainer(tokenizer=...)")
            ids = self.model.generate(self.tokenizer.encode(inputs), **options)
            return self.tokenizer.decode(ids)
        return self.model.generate(inputs, **options)
