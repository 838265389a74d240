"""mstrain.profiler.kernel_times: one median time per kernel of a compiled step, labelled by what the
kernel computes, and the step still trains after being timed."""
import shutil

import numpy as np
import pytest

from mstrain.profiler import kernel_times
from mstrain.train.sink import GraphSinkRunner

from .test_sink import _data, _train_cell

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def test_every_kernel_of_a_compiled_block_step_gets_one_labelled_median():
    cell = _train_cell("block")
    runner = GraphSinkRunner(cell)
    batches = _data("block", 6)
    first = runner.run(batches[:3])
    executable = runner.compiled_calls()[0].executable
    times = kernel_times(executable, steps=5)
    assert len(times) == len(executable.plan)
    seconds = [s for _, s in times]
    assert seconds == sorted(seconds, reverse=True) and min(seconds) >= 0 and sum(seconds) > 0
    labels = [label for label, _ in times]
    assert any(label.startswith("fused(") for label in labels)
    assert any(label.startswith(("matmul", "dense_weight_grad")) for label in labels)
    assert any(label.startswith("softmax") or "softmax" in label or "exp" in label for label in labels)
    # the timed steps ran on the bound buffers: training carries on from them, loss still finite and falling
    later = runner.run(batches[3:])
    assert np.all(np.isfinite(later)) and later[-1] < first[0]


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match="steps must be at least 1"):
        kernel_times(object(), steps=0)
