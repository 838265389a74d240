"""The supported-op list is generated from the op table: one row per primitive with probed dtypes."""
from mstrain.ops import support
from mstrain.ops.primitive import REGISTRY


def test_support_list_has_a_row_per_primitive_with_probed_facts(tmp_path):
    out = tmp_path / "ops.md"
    assert support.main(["--output", str(out)]) == 0
    text = out.read_text()
    rows = {line.split("|")[1].strip().strip("`"): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| `")}
    core_prims = {n for n, p in REGISTRY.items() if p.impl.__module__.startswith(("mstrain.", "core."))}
    assert core_prims <= set(rows)
    assert rows["add"] == ["float16, float32, float64, int32, int64, bool", "yes", "yes", "fused C++", "yes"]
    assert rows["argmax"][1] == "-" and rows["matmul"][2] == "yes"
    assert "`Pad`" in text and "`neg`" in text


def test_probe_reports_rejected_dtypes():
    float_only = REGISTRY["apply_ftrl"]
    assert support.probe_dtypes(float_only) == ["float16", "float32", "float64"]
    assert "bool" in support.probe_dtypes(REGISTRY["logical_not"])
