"""ViT: patch embedding, class token, learned positions, pre-LN encoder blocks, head on the class token.

    net = ViT(ViTConfig(image_size=28, patch_size=4, channels=1, num_classes=10))
    logits = net(Tensor(images))    # (B, C*H*W) or (B, C, H, W) float -> (B, num_classes)

The encoder blocks are the kit's shared `TransformerBlock` (bidirectional attention), so the same
model runs tensor-parallel over `groups.model`. Weights, positions and the class token start from
N(0, 0.02) (the peer's truncated normal cuts at +-2, which N(0, 0.02) never reaches), biases zero.
"""
from dataclasses import asdict, dataclass

import numpy as np

from mstrain import Parameter, nn
from mstrain.common.initializer import Normal, Zero, initializer
from mstrain.errors import ShapeError
from mstrain.ops import functional as F

from .layers import TransformerBlock

__all__ = ["ViTConfig", "ViT"]


@dataclass
class ViTConfig:
    """Shape of a ViT (W7: 28x28x1 images, patch 4, width 128, depth 4, 4 heads, MLP 256)."""
    image_size: int = 28
    patch_size: int = 4
    channels: int = 1
    num_classes: int = 10
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    ffn_hidden_size: int = 256
    layernorm_epsilon: float = 1e-5
    init_std: float = 0.02

    @property
    def num_patches(self):
        return (self.image_size // self.patch_size) ** 2

    def to_dict(self):
        return asdict(self)


class ViT(nn.Cell):
    """`ViT(config, groups=None)`: on one rank, or its blocks tensor-parallel over `groups.model`."""

    def __init__(self, config, groups=None):
        super().__init__()
        if config.image_size % config.patch_size:
            raise ShapeError(f"ViT: image_size {config.image_size} is not a multiple of patch_size {config.patch_size}")
        self.config, self.groups = config, groups
        c, std = config, config.init_std
        patch_dim = c.channels * c.patch_size ** 2
        self.patch_embedding = nn.Dense(patch_dim, c.hidden_size, weight_init=Normal(std), bias_init=Zero())
        self.cls_token = Parameter(initializer(Normal(std), (1, 1, c.hidden_size)), name="cls_token")
        self.positions = Parameter(initializer(Normal(std), (1, c.num_patches + 1, c.hidden_size)), name="positions")
        self.blocks = nn.CellList([
            TransformerBlock(c.hidden_size, c.num_heads, c.ffn_hidden_size, groups, activation=nn.GELU(approximate=False),
                             epsilon=c.layernorm_epsilon, init_std=std, out_std=std)
            for _ in range(c.num_layers)])
        self.final_norm = nn.LayerNorm((c.hidden_size,), epsilon=c.layernorm_epsilon)
        self.head = nn.Dense(c.hidden_size, c.num_classes, weight_init=Normal(std), bias_init=Zero())

    def patches(self, images):
        """(B, C*H*W) or (B, C, H, W) -> (B, patches, C*p*p), patches in row-major order."""
        c = self.config
        b, side, p = images.shape[0], c.image_size // c.patch_size, c.patch_size
        expected = c.channels * c.image_size ** 2
        if int(np.prod(images.shape[1:])) != expected:
            raise ShapeError(f"ViT: images of shape {images.shape} do not hold {c.channels}x{c.image_size}x"
                             f"{c.image_size} pixels")
        x = F.reshape(images, (b, c.channels, side, p, side, p))
        x = F.transpose(x, (0, 2, 4, 1, 3, 5))  # (B, side, side, C, p, p)
        return F.reshape(x, (b, side * side, c.channels * p * p))

    def construct(self, images):
        x = self.patch_embedding(self.patches(images))
        b = x.shape[0]
        cls = F.broadcast_to(self.cls_token, (b, 1, self.config.hidden_size))
        x = F.add(F.concat((cls, x), 1), self.positions)
        for block in self.blocks:
            x = block(x)
        first = F.reshape(F.getitem(x, (slice(None), slice(0, 1))), (b, self.config.hidden_size))
        return self.head(self.final_norm(first))
