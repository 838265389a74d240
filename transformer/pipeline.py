"""`pipeline("text_generation", model=...)`: text in, generated text out (MindFormers' pipeline).

    gen = pipeline("text_generation", model="outputs/gpt_char")     # a training output directory
    gen = pipeline("text_generation", model=gpt, tokenizer=tok)     # or a GPT and its tokenizer
    gen("ROMEO:", max_new_tokens=100, do_sample=True, top_k=10)     # -> [{"generated_text": "ROMEO:..."}]

A directory is what the gpt_char job writes: config.json (the GPTConfig), tokenizer.json and
gpt_char.ckpt.
"""
import json
from pathlib import Path

import mstrain as ms

from .gpt import GPT, GPTConfig
from .tokenizer import CharTokenizer

__all__ = ["pipeline", "TextGenerationPipeline"]

TASKS = ("text_generation",)


class TextGenerationPipeline:
    """Encodes a prompt (or a list of prompts), calls `model.generate`, decodes."""

    def __init__(self, model, tokenizer, **defaults):
        self.model, self.tokenizer, self.defaults = model, tokenizer, defaults

    def __call__(self, text, **generate_kwargs):
        prompts = [text] if isinstance(text, str) else list(text)
        options = {**self.defaults, **generate_kwargs}
        results = []
        for prompt in prompts:
            ids = self.model.generate(self.tokenizer.encode(prompt), **options)
            results.append({"generated_text": self.tokenizer.decode(ids)})
        return results


def _from_directory(path):
    path = Path(path)
    for name in ("config.json", "tokenizer.json", "gpt_char.ckpt"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"pipeline: {path / name} not found (model= must be a GPT or a gpt_char "
                                    f"output directory)")
    config = GPTConfig(**json.loads((path / "config.json").read_text()))
    model = GPT(config)
    ms.load_param_into_net(model, ms.load_checkpoint(str(path / "gpt_char.ckpt")))
    return model, CharTokenizer.load(path / "tokenizer.json")


def pipeline(task, model, tokenizer=None, **generate_defaults):
    """A callable for `task` ("text_generation") over `model` (a GPT or an output directory)."""
    if task not in TASKS:
        raise ValueError(f"pipeline: unknown task {task!r}; known: {', '.join(TASKS)}")
    if isinstance(model, (str, Path)):
        model, saved_tokenizer = _from_directory(model)
        tokenizer = tokenizer or saved_tokenizer
    if tokenizer is None:
        raise ValueError("pipeline: tokenizer= is required when model= is a network")
    if isinstance(tokenizer, (str, Path)):
        tokenizer = CharTokenizer.load(tokenizer)
    return TextGenerationPipeline(model, tokenizer, **generate_defaults)
