"""mstrain transformer kit: GPT, T5 and ViT networks, their tokenisation and data, generation and
parallel layouts (in the spirit of MindSpore Transformers). Imports only `core`'s public names.

    from mstrain.transformer import GPT, GPTConfig, T5, T5Config, ViT, ViTConfig, Trainer, CharTokenizer, pipeline
"""
from .bpe import ByteBPETokenizer  # noqa: F401
from .generation import GenerationMixin  # noqa: F401
from .gpt import GPT, GPTConfig, GPTLoss  # noqa: F401
from .layers import Attention, FeedForward, KVCache, RMSNorm, TransformerBlock  # noqa: F401
from .pipeline import TextGenerationPipeline, pipeline  # noqa: F401
from .tokenizer import CharTokenizer  # noqa: F401
from .t5 import T5, T5Config, T5WithLoss  # noqa: F401
from .trainer import Trainer, TrainingArguments  # noqa: F401
from .vit import ViT, ViTConfig  # noqa: F401

__all__ = ["GPT", "GPTConfig", "GPTLoss", "GenerationMixin", "Attention", "FeedForward", "KVCache", "RMSNorm",
           "TransformerBlock", "CharTokenizer", "pipeline", "TextGenerationPipeline", "ViT", "ViTConfig",
           "T5", "T5Config", "T5WithLoss", "Trainer", "TrainingArguments",
           "ByteBPETokenizer"]
