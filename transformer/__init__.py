"""mstrain transformer kit: GPT, T5 and ViT networks, their tokenisation and data, generation and
parallel layouts (in the spirit of MindSpore Transformers). Imports only `core`'s public names."""
