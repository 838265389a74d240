"""Values and gradients against torch.autograd (skipped when torch is not installed, see
tests/torch_support.py)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops

from ...torch_support import import_torch

torch = import_torch()
tF = torch.nn.functional

_RNG = np.random.default_rng(0)
X = _RNG.standard_normal((5, 7))
LABELS = _RNG.integers(0, 7, 5)

PAIRS = [
    ("relu", ops.relu, torch.relu),
    ("gelu_tanh", ops.gelu, lambda t: tF.gelu(t, approximate="tanh")),
    ("gelu_erf", lambda t: ops.gelu(t, False), tF.gelu),
    ("tanh", ops.tanh, torch.tanh),
    ("sigmoid", ops.sigmoid, torch.sigmoid),
    ("elu", ops.elu, tF.elu),
    ("leaky_relu", lambda t: ops.leaky_relu(t, 0.2), lambda t: tF.leaky_relu(t, 0.2)),
    ("softplus", ops.softplus, tF.softplus),
    ("silu", ops.silu, tF.silu),
    ("erf", ops.erf, torch.erf),
    ("softmax", ops.softmax, lambda t: torch.softmax(t, -1)),
    ("log_softmax", ops.log_softmax, lambda t: torch.log_softmax(t, -1)),
    ("layer_norm", lambda t: ops.layer_norm(t, None, None), lambda t: tF.layer_norm(t, (7,))),
    ("cross_entropy", lambda t: ops.softmax_cross_entropy(t, Tensor(LABELS)),
     lambda t: tF.cross_entropy(t, torch.tensor(LABELS), reduction="none")),
    ("bce", lambda t: ops.binary_cross_entropy_with_logits(t, Tensor(np.abs(np.sin(X)))),
     lambda t: tF.binary_cross_entropy_with_logits(t, torch.tensor(np.abs(np.sin(X))), reduction="none")),
    ("cumsum", lambda t: ops.cumsum(t, 1), lambda t: torch.cumsum(t, 1)),
    ("topk", lambda t: ops.topk(t, 3)[0], lambda t: torch.topk(t, 3).values),
    ("norm", ops.norm, torch.linalg.norm),
]


@pytest.mark.parametrize("name,ours,theirs", PAIRS, ids=[p[0] for p in PAIRS])
def test_matches_torch(name, ours, theirs):
    weights = _RNG.standard_normal(np.shape(ours(Tensor(X)).asnumpy()))
    value = ours(Tensor(X)).asnumpy()
    grad = ms.grad(lambda t: ops.sum(ours(t) * Tensor(weights)))(Tensor(X)).asnumpy()
    xt = torch.tensor(X, requires_grad=True)
    out = theirs(xt)
    (out * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-6, atol=1e-8)
