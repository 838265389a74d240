"""Run report: repeated-subgraph folding, the HTML page, and the page in a real headless browser."""
import json
import re

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.report import build_report, capture_graph, repeated_subgraphs
from mstrain.summary import read_events

from .browser import LAUNCH_ARGS, chromium_path


class Block(nn.Cell):
    """Attention-like block: four projections, two products, a norm."""

    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Dense(d, d), nn.Dense(d, d), nn.Dense(d, d), nn.Dense(d, d)
        self.norm = nn.LayerNorm((d,))

    def construct(self, x):
        a = ops.softmax(ops.matmul(self.q(x), self.k(x).T), -1)
        return self.norm(x + self.o(ops.matmul(a, self.v(x))))


class FourBlocks(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = nn.Dense(4, 8)
        self.blocks = nn.SequentialCell([Block(8) for _ in range(4)])
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        return self.head(self.blocks(self.embed(x)))


def test_four_blocks_fold_into_one_group_of_four():
    graph = capture_graph(FourBlocks(), np.ones((3, 4), np.float32))
    groups = repeated_subgraphs(graph)
    assert len(groups) == 1
    group = groups[0]
    assert group["instances"] == [f"blocks.{i}" for i in range(4)] and group["cell_type"] == "Block"
    per_block = [n for n in graph["nodes"] if n["scope"].startswith("blocks.0")]
    assert group["node_count"] == len(per_block) and len(graph["nodes"]) == 4 * len(per_block) + 2  # + embed, head
    assert {n["scope"] for n in graph["nodes"]} >= {"embed", "head", "blocks.3.q", "blocks.0.norm"}
    json.dumps(groups)  # plain data


def test_a_changed_block_leaves_the_group():
    net = FourBlocks()
    net.blocks[2].construct = lambda x: net.blocks[2].norm(x)  # block 2 now computes something else
    groups = repeated_subgraphs(capture_graph(net, np.ones((3, 4), np.float32)))
    assert [g["instances"] for g in groups] == [["blocks.0", "blocks.1", "blocks.3"]]


def test_gcn_layers_form_one_group_of_two(repo_root):
    gnn = pytest.importorskip("mstrain.gnn")
    from mstrain.gnn.models import GCN
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    n, f = 12, 5
    edges = np.array([[i, (i + 1) % n] for i in range(n)] + [[(i + 1) % n, i] for i in range(n)]).T
    net = GCN(f, 7, 3)
    net.set_train(False)
    graph = capture_graph(net, rng.normal(size=(n, f)).astype(np.float32), edges.astype(np.int64))
    groups = repeated_subgraphs(graph)
    assert len(groups) == 1 and len(groups[0]["instances"]) == 2, groups
    assert gnn is not None


def _observed_run(tmp_path, mstrain):
    code, _, err = mstrain("--config", "mlp_mnist", "profile=true", "summary_freq=2", "train.epochs=2",
                           "data.train_size=256", "data.test_size=64", f"train.output_dir={tmp_path}")
    assert code == 0, err
    return tmp_path / "mlp_mnist"


def test_report_page_is_self_contained_and_holds_the_run(tmp_path, mstrain):
    run = _observed_run(tmp_path, mstrain)
    code, out, _ = mstrain("report", str(run))
    assert code == 0 and out.strip().endswith("report.html")
    page = (run / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched from elsewhere
    losses = [e for e in read_events(str(run / "summary")) if e.tag == "loss"]
    assert f'data-tag="loss" data-points="{len(losses)}" data-last="{losses[-1].value:.6g}"' in page
    table = json.loads((run / "profiler" / "rank0" / "op_statistic.json").read_text())
    assert f'<td class="name">{table["op_types"][0]["type"]}</td><td>{table["op_types"][0]["count"]}</td>' in page
    assert "optimizer:" in page  # the config
    pipeline = json.loads((run / "profiler" / "rank0" / "pipeline.json").read_text())
    assert f'<p id="bottleneck"><b>{pipeline["sentence"]}</b></p>' in page
    graph = json.loads((run / "graph.json").read_text())
    graph_events = [e for e in read_events(str(run / "summary")) if e.kind == "graph"]
    assert len(graph_events) == 1
    from mstrain.summary import _proto as pb
    nodes = [pb.parse(n) for n in pb.parse(graph_events[0].value)[1]]
    assert len(nodes) == len(graph["nodes"])
    first = graph["nodes"][0]
    assert nodes[0][1][0].decode() == f"{first['scope'].replace('.', '/')}/{first['op']}_0".lstrip("/")
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        pass  # the project's reader above is the check; TensorBoard's own when installed
    else:
        acc = EventAccumulator(str(run / "summary"))
        acc.Reload()
        assert len(acc.Graph().node) == len(graph["nodes"])
    code, _, err = mstrain("report", str(tmp_path / "nope"))
    assert code == 2 and "nope" in err


def test_report_in_a_headless_browser(tmp_path, mstrain):
    path, reason = chromium_path()
    if path is None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright
    run = tmp_path / "run"
    net = FourBlocks()
    from mstrain.report import write_graph
    write_graph(str(run), net, np.ones((3, 4), np.float32))
    from mstrain.summary import SummaryRecord
    with SummaryRecord(str(run / "summary")) as record:
        for step in range(1, 6):
            record.add_value("scalar", "loss", 1.0 / step)
            record.record(step)
    from mstrain.profiler import Profiler
    profiler = Profiler(output_path=str(run))
    net(ms.Tensor(np.ones((3, 4), np.float32)))
    table = profiler.analyse()["ops"]
    build_report(str(run))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=LAUNCH_ARGS)
        try:
            page = browser.new_page()
            page.goto((run / "report.html").as_uri())
            group = page.locator("details.group")
            assert group.count() == 1
            inner = group.locator("details.cell").first
            assert not inner.is_visible()
            group.locator("summary").first.click()  # open the folded node
            assert inner.is_visible() and "blocks.0" in inner.inner_text()
            curve = page.locator('svg[data-tag="loss"]')
            assert curve.is_visible() and "loss: 0.2 at step 5" in curve.text_content()
            assert len(curve.locator("polyline").get_attribute("points").split()) == 5
            first = page.locator("#op-types tr").nth(1).inner_text().split("\t")
            assert first[0] == table["op_types"][0]["type"] and int(first[1]) == table["op_types"][0]["count"]
        finally:
            browser.close()


def test_observing_a_gcn_run_changes_none_of_its_numbers(tmp_path, mstrain):
    """A kit training through Model reports its steps to the run's observers; the graph capture
    and summaries leave the random stream alone, so the observed run trains exactly like a plain one."""
    common = ["--config", "gcn_cora", "train.epochs=20", "train.log_every=0"]
    code, plain, err = mstrain(*common, f"train.output_dir={tmp_path / 'plain'}")
    assert code == 0, err
    code, observed, err = mstrain(*common, "profile=true", "summary_freq=5", f"train.output_dir={tmp_path / 'obs'}")
    assert code == 0, err
    numbers = [json.loads(out.split(": ", 1)[1]) for out in (plain, observed)]
    assert numbers[0]["test_acc"] == numbers[1]["test_acc"] and numbers[0]["val_acc"] == numbers[1]["val_acc"]
    run = tmp_path / "obs" / "gcn"
    steps = json.loads((run / "profiler" / "rank0" / "step_trace.json").read_text())["steps"]
    assert len(steps) == 20
    losses = [e for e in read_events(str(run / "summary")) if e.tag == "loss"]
    assert [e.step for e in losses] == [1, 5, 10, 15, 20]
    graph = json.loads((run / "graph.json").read_text())
    assert {n["scope"].rsplit(".", 1)[-1] for n in graph["nodes"]} >= {"conv1", "conv2"}
