"""Trainer: trains through Model (the loss falls), evaluates against a direct computation, predicts."""
import numpy as np

import mstrain as ms
from mstrain import Tensor
from mstrain.transformer import CharTokenizer, GPTConfig, GPTLoss, ViTConfig
from mstrain.transformer.trainer import Trainer, TrainingArguments

TEXT = "to be or not to be that is the question " * 20


def _lm_data(tok, length=16):
    ids = tok.encode(TEXT)
    starts = np.arange(0, len(ids) - length - 1, 7)
    windows = ids[starts[:, None] + np.arange(length + 1)]
    return {"input_ids": windows[:, :-1], "labels": windows[:, 1:]}


def test_gpt_train_evaluate_predict():
    tok = CharTokenizer.train(TEXT)
    data = _lm_data(tok)
    config = GPTConfig(vocab_size=tok.vocab_size, num_layers=1, num_heads=2, hidden_size=32, seq_length=16)
    trainer = Trainer(config, args=TrainingArguments(num_train_epochs=3, per_device_train_batch_size=16,
                                                     learning_rate=3e-3, max_new_tokens=12),
                      train_dataset=data, eval_dataset=data, tokenizer=tok)
    before = trainer.evaluate()["eval_loss"]
    result = trainer.train()
    assert len(result["step_loss"]) == 3 * int(np.ceil(len(data["input_ids"]) / 16))
    after = trainer.evaluate()
    assert after["eval_loss"] < before - 0.5
    net = trainer.model
    with ms.no_grad():
        direct = float(GPTLoss(net)(net(Tensor(data["input_ids"])), Tensor(data["labels"])).asnumpy())
    assert abs(after["eval_loss"] - direct) < 1e-4 and abs(after["perplexity"] - np.exp(direct)) < 1e-3
    text = trainer.predict("to be ")
    assert text.startswith("to be ") and len(text) == 18
    assert text == tok.decode(net.generate(tok.encode("to be "), 12))


def test_vit_accuracy_and_classes():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((40, 64)).astype(np.float32)
    labels = (images[:, :32].sum(1) > 0).astype(np.int32)
    trainer = Trainer(ViTConfig(image_size=8, patch_size=4, num_classes=2, hidden_size=16, num_layers=1,
                                num_heads=2, ffn_hidden_size=32),
                      args=TrainingArguments(per_device_train_batch_size=8, weight_decay=0.0),
                      train_dataset={"image": images, "label": labels})
    trainer.train()
    metrics = trainer.evaluate({"image": images, "label": labels})
    classes = trainer.predict(images)
    assert abs(metrics["eval_accuracy"] - float((classes == labels).mean())) < 1e-9
