"""Generated kernels are compiled once, cached on disk by the hash of their source."""
import shutil

import numpy as np
import pytest

from mstrain import ops
from mstrain.graph import build, compile_graph

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


def test_kernels_are_cached_by_source_hash(trace_graph, tmp_path, monkeypatch):
    monkeypatch.setenv("MSTRAIN_CACHE_DIR", str(tmp_path))
    compiled = []
    real = build._compile
    monkeypatch.setattr(build, "_compile", lambda source, path: (compiled.append(path), real(source, path)))
    x = np.linspace(0.1, 1, 10, dtype=np.float32)
    graph = trace_graph(lambda a: ops.exp(ops.sin(a) * 3.0) - a, x)
    _, first = compile_graph(graph, fusion=True)
    assert len(compiled) == 1 and compiled[0].startswith(str(tmp_path / "kernels"))
    _, second = compile_graph(graph, fusion=True)   # same source: loaded from the cache
    assert len(compiled) == 1
    np.testing.assert_array_equal(first.run([x])[0], second.run([x])[0])


def test_a_compiler_error_falls_back_to_numpy_with_a_warning(trace_graph, monkeypatch, tmp_path):
    from mstrain.graph.native import runtime
    runtime()  # the step runner library is built before the compiler "breaks"
    monkeypatch.setenv("MSTRAIN_CACHE_DIR", str(tmp_path))

    def broken(source, path):
        raise build.KernelBuildError("simulated compiler failure")
    monkeypatch.setattr(build, "_compile", broken)
    x = np.linspace(0.1, 1, 10, dtype=np.float32)
    graph = trace_graph(lambda a: ops.exp(ops.cos(a) * 2.0) + a, x)
    with pytest.warns(UserWarning, match="runs on numpy: simulated compiler failure"):
        _, run = compile_graph(graph, fusion=True)
    np.testing.assert_allclose(run.run([x])[0], np.exp(np.cos(x) * 2.0) + x, rtol=1e-6)
