"""`mstrain data <name>` hands the command line to a kit's converter entry point."""
import importlib.metadata

from mstrain import registry
from mstrain.mindrecord import cli

CALLS = []


def fake_converter(argv):
    CALLS.append(list(argv))
    return 3 if "--fail" in argv else None


def test_entry_points_reads_any_group():
    jobs = registry.entry_points(registry.ENTRY_POINT_GROUP)
    assert jobs["gcn"].value == "mstrain.gnn.jobs"
    assert registry.entry_points("mstrain.no_such_group") == {}


def test_data_verb_dispatches_to_a_kit_converter(monkeypatch, capsys):
    point = importlib.metadata.EntryPoint("fake", f"{__name__}:fake_converter", cli.DATA_ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: {"fake": point} if group == "mstrain.data" else {})
    assert cli.main(["data", "fake", "a", "b"]) == 0
    assert cli.main(["fake", "--fail"]) == 3
    assert CALLS[-2:] == [["a", "b"], ["--fail"]]
    assert cli.main(["nonsense"]) == 2  # unknown verbs still get the usage error
    assert "mstrain data: error" in capsys.readouterr().err
