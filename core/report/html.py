"""One self-contained HTML page for a run directory: no script or style from elsewhere.

Sections: the run's result and config, curves of every scalar summary (plain SVG), weight and
gradient histograms over steps, the profiler's step breakdown and op tables, and the folded graph
view (the Cell tree; repeated identical subgraphs folded into one node, opened with a click:
HTML <details>, no script needed).
"""
import html
import json
import os

__all__ = ["build_report", "build_comparison", "load_run"]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;margin-top:32px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.name,th.name{text-align:left;font-family:monospace}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:400px}
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart{border:1px solid #eee;padding:4px}
details{margin-left:18px}summary{cursor:pointer;font-family:monospace}
details.group>summary{color:#8a2be2;font-weight:bold}.ops{color:#666;font-family:monospace;margin-left:18px}
.bar{display:inline-block;height:14px}
"""
_COLORS = {"data_wait": "#9e9e9e", "forward": "#1f77b4", "backward": "#ff7f0e", "optimizer": "#2ca02c",
           "communication": "#d62728", "host_overhead": "#8c564b"}


def _read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def load_run(run_dir):
    """Everything a report shows, from the files of a run directory (missing parts are None)."""
    from ..summary import read_events
    from ..summary.events import event_files
    if not os.path.isdir(run_dir):
        from ..errors import UserError
        raise UserError(f"no run directory at {run_dir!r}")
    events = []
    for folder in (os.path.join(run_dir, "summary"), os.path.join(run_dir, "summary", "rank0")):
        if os.path.isdir(folder) and event_files(folder):
            events = read_events(folder)
            break
    config = None
    if os.path.exists(os.path.join(run_dir, "config.yaml")):
        with open(os.path.join(run_dir, "config.yaml")) as f:
            config = f.read()
    prof = os.path.join(run_dir, "profiler", "rank0")
    return {"run_dir": run_dir, "events": events, "config": config,
            "result": _read_json(os.path.join(run_dir, "result.json")),
            "ops": _read_json(os.path.join(prof, "op_statistic.json")),
            "steps": _read_json(os.path.join(prof, "step_trace.json")),
            "pipeline": _read_json(os.path.join(prof, "pipeline.json")),
            "graph": _read_json(os.path.join(run_dir, "graph.json")),
            "groups": _read_json(os.path.join(run_dir, "repeated_subgraphs.json"))}


def _fmt(value):
    return f"{value:.6g}" if isinstance(value, float) else html.escape(str(value))


def line_chart(tag, points, width=360, height=200):
    """An SVG polyline of (step, value) points with min/max labels; data-* attributes hold the numbers."""
    pad = 36
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    lo, hi = min(values), max(values)
    span, step_span = (hi - lo) or 1.0, (max(steps) - min(steps)) or 1

    def xy(step, value):
        return (pad + (step - min(steps)) / step_span * (width - 2 * pad),
                height - pad - (value - lo) / span * (height - 2 * pad))
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, v) for s, v in points))
    last_step, last = points[-1]
    return (f'<svg class="chart" data-tag="{html.escape(tag)}" data-points="{len(points)}" '
            f'data-last="{last:.6g}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{pad}" y="16" font-size="13">{html.escape(tag)}: {last:.6g} at step {last_step}</text>'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
            f'<text x="2" y="{pad + 4}" font-size="10">{hi:.4g}</text>'
            f'<text x="2" y="{height - pad}" font-size="10">{lo:.4g}</text>'
            f'<text x="{pad}" y="{height - pad + 14}" font-size="10">{min(steps)}</text>'
            f'<text x="{width - pad - 20}" y="{height - pad + 14}" font-size="10">{max(steps)}</text>'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{coords}"/></svg>')


def histogram_chart(tag, histograms, width=360, height=200):
    """Bucket counts of each recorded step as stacked outlines, later steps darker."""
    pad = 30
    lo = min(h["min"] for _, h in histograms)
    hi = max(h["max"] for _, h in histograms) or lo + 1
    top = max(max(h["bucket"] or [1]) for _, h in histograms) or 1
    lines = []
    for k, (step, h) in enumerate(histograms):
        shade = int(200 - 160 * (k + 1) / len(histograms))
        edges = [h["min"]] + h["bucket_limit"]
        pts = []
        for left, right, count in zip(edges[:-1], edges[1:], h["bucket"]):
            x = pad + ((left + right) / 2 - lo) / ((hi - lo) or 1) * (width - 2 * pad)
            pts.append(f"{x:.1f},{height - pad - count / top * (height - 2 * pad):.1f}")
        lines.append(f'<polyline fill="none" stroke="rgb({shade},{shade},255)" points="{" ".join(pts)}">'
                     f'<title>step {step}</title></polyline>')
    return (f'<svg class="chart histogram" data-tag="{html.escape(tag)}" data-steps="{len(histograms)}" '
            f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{pad}" y="16" font-size="13">{html.escape(tag)} ({len(histograms)} steps)</text>'
            f'<text x="{pad}" y="{height - 8}" font-size="10">{lo:.3g}</text>'
            f'<text x="{width - pad - 30}" y="{height - 8}" font-size="10">{hi:.3g}</text>{"".join(lines)}</svg>')


def _curves(events):
    scalars, hists = {}, {}
    for e in events:
        if e.kind == "scalar":
            scalars.setdefault(e.tag, []).append((e.step, e.value))
        elif e.kind == "histogram":
            hists.setdefault(e.tag, []).append((e.step, e.value))
    parts = ['<h2>Curves</h2><div class="charts">']
    parts += [line_chart(tag, points) for tag, points in scalars.items()]
    parts.append("</div>")
    if hists:
        parts.append('<h2>Histograms over steps</h2><div class="charts">')
        parts += [histogram_chart(tag, series) for tag, series in list(hists.items())[:12]]
        parts.append("</div>")
    return "".join(parts) if scalars or hists else ""


def _steps_section(steps):
    mean = steps.get("mean") or {}
    if not mean:
        return ""
    total = mean["total"] or 1.0
    bar = "".join(f'<span class="bar" title="{p}" style="width:{600 * mean[p] / total:.1f}px;'
                  f'background:{_COLORS[p]}"></span>' for p in steps["phases"])
    rows = "".join(f'<tr><td class="name"><span class="bar" style="width:10px;background:{_COLORS[p]}"></span> '
                   f'{p}</td><td>{1e3 * mean[p]:.4f}</td><td>{100 * mean[p] / total:.1f}%</td></tr>'
                   for p in steps["phases"])
    return (f'<h2>Step breakdown</h2><p>{len(steps["steps"])} steps, mean {1e3 * mean["total"]:.4f} ms</p>'
            f'<div>{bar}</div><table id="step-breakdown"><tr><th class="name">phase</th><th>mean ms</th>'
            f'<th>share</th></tr>{rows}</table>')


def _ops_section(ops, limit=40):
    def table(rows, key, table_id):
        body = "".join(
            f'<tr><td class="name">{html.escape(r[key])}</td><td>{r["count"]}</td>'
            f'<td>{1e3 * r["total_s"]:.4f}</td><td>{1e6 * r["mean_s"]:.3f}</td><td>{100 * r["share"]:.2f}%</td>'
            f'<td class="name">{html.escape(" ".join(r.get("ops_inside") or []))}</td></tr>' for r in rows[:limit])
        return (f'<table id="{table_id}"><tr><th class="name">{key}</th><th>count</th><th>total ms</th>'
                f'<th>mean us</th><th>share of {html.escape(ops["share_of"])}</th><th class="name">ops inside</th>'
                f'</tr>{body}</table>')
    return ("<h2>Profiler: op types</h2>" + table(ops["op_types"], "type", "op-types")
            + "<h2>Profiler: ops</h2>" + table(ops["ops"], "name", "op-table"))


def _pipeline_section(pipeline):
    if not pipeline or not pipeline.get("ops"):
        return ""
    def rate(op):
        return "" if op["rows_per_s"] is None else f"{op['rows_per_s']:.0f}"
    rows = "".join(f'<tr><td class="name">{html.escape(op["op"])}</td><td>{op["rows"]}</td>'
                   f'<td>{1e3 * op["own_s"]:.3f}</td><td>{rate(op)}</td></tr>' for op in pipeline["ops"])
    workers = "".join(f'<tr><td class="name">{html.escape(name)}</td><td>{100 * share:.0f}%</td></tr>'
                      for name, share in sorted(pipeline.get("workers", {}).items()))
    sentence = f'<p id="bottleneck"><b>{html.escape(pipeline["sentence"])}</b></p>' if pipeline.get("sentence") else ""
    return (f'<h2>Input pipeline</h2>{sentence}<table id="pipeline"><tr><th class="name">operation</th>'
            f'<th>rows</th><th>own ms</th><th>rows/s it can deliver</th></tr>{rows}</table>'
            + (f'<table><tr><th class="name">thread</th><th>busy</th></tr>{workers}</table>' if workers else ""))


def _tree_html(node):
    ops = f'<div class="ops">{html.escape(", ".join(node["ops"]))}</div>' if node["ops"] else ""
    inner = ops + "".join(_tree_html(c) for c in node["children"])
    if node.get("group"):
        label = (f'{html.escape(node["scope"])} (folded: {len(node["children"])} identical instances, '
                 f'{node["node_count"]} ops each)')
        return f'<details class="group" data-hash="{node["hash"]}"><summary>{label}</summary>{inner}</details>'
    label = f'{html.escape(node["scope"])} <i>{html.escape(node["type"])}</i>'
    if not node["children"]:
        return f'<details class="cell"><summary>{label}</summary>{ops}</details>'
    return f'<details class="cell" open><summary>{label}</summary>{inner}</details>'


def _graph_section(graph, groups):
    from .graph import cell_tree
    tree = cell_tree(graph, groups or [])
    listed = "".join(f'<li><b>{html.escape(g["cell_type"])}</b> x{len(g["instances"])}: '
                     f'{html.escape(", ".join(g["instances"]))} ({g["node_count"]} ops each)</li>' for g in groups or [])
    return (f'<h2>Graph</h2><p>{len(graph["nodes"])} ops; repeated subgraphs:</p><ul>{listed or "<li>none</li>"}</ul>'
            f'<div id="graph">{_tree_html(tree)}</div>')


def build_report(run_dir, output=None):
    """Write the page (default `<run_dir>/report.html`); returns its path."""
    from ..fileio import write_bytes_atomically
    run = load_run(run_dir)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>mstrain run {html.escape(run_dir)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>Run {html.escape(os.path.abspath(run_dir))}</h1>"]
    if run["result"]:
        rows = "".join(f'<tr><td class="name">{html.escape(k)}</td><td>{_fmt(v)}</td></tr>'
                       for k, v in run["result"].items())
        parts.append(f'<h2>Result</h2><table id="result">{rows}</table>')
    parts.append(_curves(run["events"]))
    if run["steps"]:
        parts.append(_steps_section(run["steps"]))
    if run["ops"]:
        parts.append(_ops_section(run["ops"]))
    parts.append(_pipeline_section(run["pipeline"]))
    if run["graph"]:
        parts.append(_graph_section(run["graph"], run["groups"]))
    if run["config"]:
        parts.append(f'<h2>Config</h2><pre id="config">{html.escape(run["config"])}</pre>')
    parts.append("</body></html>")
    output = output or os.path.join(run_dir, "report.html")
    write_bytes_atomically(output, "".join(parts).encode("utf-8"))
    return output


def scatter_chart(x_name, y_name, points, width=360, height=220):
    """An SVG scatter of (x, y, label) points, each dot titled with its run."""
    pad = 40
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)

    def sx(v):
        return pad + (v - x_lo) / ((x_hi - x_lo) or 1) * (width - 2 * pad)

    def sy(v):
        return height - pad - (v - y_lo) / ((y_hi - y_lo) or 1) * (height - 2 * pad)
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="#1f77b4" data-x="{x:.6g}" '
                   f'data-y="{y:.6g}"><title>{html.escape(label)}: {x_name}={x:.6g}, {y_name}={y:.6g}</title></circle>'
                   for x, y, label in points)
    return (f'<svg class="chart scatter" data-x="{html.escape(x_name)}" data-y="{html.escape(y_name)}" '
            f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{pad}" y="16" font-size="13">{html.escape(y_name)} vs {html.escape(x_name)}</text>'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
            f'<text x="{pad}" y="{height - pad + 14}" font-size="10">{x_lo:.4g}</text>'
            f'<text x="{width - pad - 24}" y="{height - pad + 14}" font-size="10">{x_hi:.4g}</text>'
            f'<text x="2" y="{pad + 4}" font-size="10">{y_hi:.4g}</text>'
            f'<text x="2" y="{height - pad}" font-size="10">{y_lo:.4g}</text>{dots}</svg>')


def build_comparison(run_dirs, output):
    """A page of several runs side by side: the lineage table (the keys that differ, data changes,
    metrics) and a scatter of every numeric differing key against every metric."""
    from ..fileio import write_bytes_atomically
    from ..lineage import lineage_table
    header, rows = lineage_table(run_dirs)
    table = "".join(f'<tr>{"".join(f"<td class=name>{_fmt(v)}</td>" for v in row)}</tr>' for row in rows)
    data_col = header.index("data")
    keys, metrics = header[1:data_col], header[data_col + 1:]
    charts = []
    for key in keys:
        k = header.index(key)
        for metric in metrics:
            m = header.index(metric)
            points = [(float(r[k]), float(r[m]), str(r[0])) for r in rows
                      if isinstance(r[k], (int, float)) and isinstance(r[m], (int, float))]
            if len(points) >= 2:
                charts.append(scatter_chart(key, metric, points))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>mstrain runs</title><style>{_STYLE}</style>"
            f"</head><body><h1>{len(run_dirs)} runs</h1><h2>Lineage</h2><table id=\"lineage\"><tr>"
            + "".join(f"<th class=name>{html.escape(h)}</th>" for h in header) + f"</tr>{table}</table>"
            f"<h2>Hyperparameters against metrics</h2><div class=\"charts\">{''.join(charts)}</div></body></html>")
    write_bytes_atomically(output, page.encode("utf-8"))
    return output
