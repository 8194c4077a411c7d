"""A run's results in three forms: JSON (everything), a markdown table, a PNG chart.

The results dict (also the JSON):
    machine:   cpu, cores, versions, date, command (machine.py)
    settings:  the run's settings (runner.Settings)
    reference: the system every other is checked against
    systems:   [{name, label, peer, precision}] in column order
    models:    {model: {status: ok|skipped|error, message?, onnx, export_s, inputs,
                        systems: {system: {label, peer, precision,
                                           status: ok|wrong|error|skipped|not run,
                                           median_ms, p10_ms, p90_ms, runs, round_ms,
                                           compile_s, max_rel_diff, error, info}}}}
Ratios are speedups (>1: level 2 is faster): "L2 vs L0" = L0 / L2; "L2 vs best peer" = the
fastest correct fp32 peer (by median) / L2 (a bf16 peer is shown, never the yardstick: it does
less work per value than autofusion's fp32); "L2 bf16 vs OpenVINO bf16" = OpenVINO's default
(bf16 on these CPUs) / autofusion L2 bf16: bf16 against bf16. Each is the median over rounds of
the two systems' block medians in that round (round_ms: timing.paired_ratio), which cancels the
host's slow and fast phases; of the pooled medians where a result has no rounds.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from .timing import paired_ratio

L0, L2, L2_BF16 = "autofusion-L0", "autofusion-L2", "autofusion-L2-bf16"
OPENVINO_BF16 = "openvino"


# ---- ratios --------------------------------------------------------------------------------

def _median(model: dict, system: str) -> float | None:
    r = model.get("systems", {}).get(system)
    return r["median_ms"] if r and r["status"] == "ok" else None


def _speedup(model: dict, baseline: str, system: str) -> float | None:
    """baseline's time / system's, round by round where both have their rounds' medians
    (timing.paired_ratio), else of their pooled medians."""
    slow, fast = _median(model, baseline), _median(model, system)
    if not (slow and fast):
        return None
    rounds = [model["systems"][n].get("round_ms") for n in (baseline, system)]
    if all(rounds) and len(rounds[0]) == len(rounds[1]):
        return paired_ratio(*rounds)
    return slow / fast


def speedup_l2_vs_l0(model: dict) -> float | None:
    return _speedup(model, L0, L2)


def best_peer(model: dict) -> tuple[str, str, float] | None:
    """(system, label, median ms) of the fastest fp32 peer whose outputs were right."""
    timed = [(r["median_ms"], name, r["label"]) for name, r in model.get("systems", {}).items()
             if r["peer"] and r.get("precision", "fp32") == "fp32" and r["status"] == "ok"]
    if not timed:
        return None
    ms, name, label = min(timed)
    return name, label, ms


def speedup_l2_vs_best_peer(model: dict) -> tuple[float, str] | None:
    peer = best_peer(model)
    ratio = peer and _speedup(model, peer[0], L2)
    return (ratio, peer[1]) if ratio else None


def speedup_bf16_vs_openvino(model: dict) -> float | None:
    return _speedup(model, OPENVINO_BF16, L2_BF16)


# ---- JSON ----------------------------------------------------------------------------------

def _jsonable(x):
    """inf/nan (e.g. a max rel diff against a NaN output) as strings: JSON has no such numbers."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def write_json(results: dict, path: Path) -> None:
    path.write_text(json.dumps(_jsonable(results), indent=2) + "\n")


# ---- markdown ------------------------------------------------------------------------------

def _ms(x: float) -> str:
    """Three significant digits without exponents: 1234, 123, 12.3, 1.23, 0.123."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def _cell(r: dict | None, value) -> str:
    if r is None:
        return "—"
    if r["status"] == "ok":
        return value(r)
    if r["status"] == "wrong":
        return f"wrong ({r['max_rel_diff']:.1e})"
    return r["status"]


def _table(results: dict, value, ratios: bool) -> list[str]:
    systems = results["systems"]
    header = ["model", *(s["label"] for s in systems)]
    bf16 = ratios and {L2_BF16, OPENVINO_BF16} <= {s["name"] for s in systems}
    if ratios:
        header += ["L2 vs L0", "L2 vs best peer"] + (["L2 bf16 vs OpenVINO bf16"] if bf16 else [])
    lines = ["| " + " | ".join(header) + " |",
             "| --- |" + " ---: |" * (len(header) - 1)]
    for name, model in results["models"].items():
        if model["status"] != "ok":
            row = [name, model["status"], *([""] * (len(systems) - 1))]
            if ratios:
                row += ["", ""] + ([""] if bf16 else [])
        else:
            row = [name, *(_cell(model["systems"].get(s["name"]), value) for s in systems)]
            if ratios:
                vs_l0, vs_peer = speedup_l2_vs_l0(model), speedup_l2_vs_best_peer(model)
                row += [f"{vs_l0:.2f}x" if vs_l0 else "—",
                        f"{vs_peer[0]:.2f}x ({vs_peer[1]})" if vs_peer else "—"]
                if bf16:
                    vs_ov = speedup_bf16_vs_openvino(model)
                    row.append(f"{vs_ov:.2f}x" if vs_ov else "—")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _reference_label(results: dict) -> str:
    name = results.get("reference", "torch-eager")
    return next((s["label"] for s in results["systems"] if s["name"] == name), name)


def markdown(results: dict, title: str = "autofusion benchmark", notes: Sequence[str] = ()) -> str:
    """The run as markdown: the median table with its ratios, then `notes` (one line each), the
    spread, the compile times and every problem."""
    m, s = results["machine"], results["settings"]
    v = m["versions"]
    commit = f" ({m['autofusion_commit']})" if m.get("autofusion_commit") else ""
    openvino = f", openvino {v['openvino']}" if v.get("openvino") else ""
    lines = [
        f"# {title} — {m['date']}", "",
        f"{m['cpu']}, {m['cores']} cores; {s['threads']} threads for every system; batch {s['batch']}; "
        f"python {m['python']}, torch {v['torch']}, onnxruntime {v['onnxruntime']}{openvino}, "
        f"onnx {v['onnx']}, autofusion {v['autofusion']}{commit}.", "",
        f"Median latency in ms of {s['rounds']} rounds x {s['block']} runs per system, systems "
        f"alternating in blocks after {s['warmup']} warm-up runs each. Outputs checked against "
        f"{_reference_label(results)} first: \"wrong (d)\" = max|diff|/max|ref| = d > "
        f"{s['tolerance']:g}, not timed. Ratios > 1: autofusion level 2 is faster; the best peer "
        f"is the fastest fp32 one.", "",
        f"Command: `{m['command']}`", "",
        *_table(results, lambda r: _ms(r["median_ms"]), ratios=True), "",
        *(f"- {note}" for note in notes), *([""] if notes else []),
        "## Spread (p10–p90 ms)", "",
        *_table(results, lambda r: f"{_ms(r['p10_ms'])}–{_ms(r['p90_ms'])}", ratios=False), "",
        "## Compile / session-creation time (s)", "",
        *_table(results, lambda r: f"{r['compile_s']:.2f}", ratios=False), "",
        f"## Output error against {_reference_label(results)} (max|diff|/max|ref|)", "",
        *_table(results, lambda r: f"{r['max_rel_diff']:.1e}", ratios=False), "",
    ]
    problems = _problems(results)
    if problems:
        lines += ["## Problems", "", *problems, ""]
    return "\n".join(lines)


def _problems(results: dict) -> list[str]:
    out = []
    for name, model in results["models"].items():
        if model["status"] != "ok":
            out.append(f"- {name}: {model['status']}: {model.get('message', '')}")
        for r in model.get("systems", {}).values():
            if r["error"]:
                out.append(f"- {name} / {r['label']}: {r['status']}: {r['error']}")
    return out


# ---- chart ---------------------------------------------------------------------------------

def write_chart(results: dict, path: Path) -> bool:
    """Latency per model per system (log scale, p10–p90 whiskers) and the speedup of level 2
    over level 0. False when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")       # files only, never a window
    import matplotlib.pyplot as plt

    models = [n for n, m in results["models"].items() if m["status"] == "ok"]
    systems = results["systems"]
    fig, (lat, spd) = plt.subplots(1, 2, figsize=(max(10, 1.6 * len(models) + 6), 6),
                                   gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(len(systems), 1)
    for i, s in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, name in enumerate(models):
            r = results["models"][name]["systems"].get(s["name"])
            if r and r["status"] == "ok":
                xs.append(j + (i - (len(systems) - 1) / 2) * width)
                ys.append(r["median_ms"])
                lo.append(r["median_ms"] - r["p10_ms"])
                hi.append(r["p90_ms"] - r["median_ms"])
        lat.bar(xs, ys, width, yerr=[lo, hi], label=s["label"], capsize=1.5,
                error_kw={"elinewidth": 0.7, "ecolor": "dimgray"},
                hatch="" if s["peer"] else "//", edgecolor="black", linewidth=0.3)
    lat.set_yscale("log")
    lat.set_xticks(range(len(models)), models, rotation=20, ha="right")
    lat.set_ylabel("median latency, ms (log; whiskers p10–p90)")
    lat.set_title("Latency per model and system (hatched: autofusion)")

    speedups = [speedup_l2_vs_l0(results["models"][n]) for n in models]
    spd.bar(range(len(models)), [x or 0 for x in speedups], color="tab:green")
    spd.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    for j, x in enumerate(speedups):
        if x:
            spd.text(j, x, f"{x:.2f}x", ha="center", va="bottom", fontsize=8)
    spd.set_xticks(range(len(models)), models, rotation=20, ha="right")
    spd.set_ylabel("L0 median / L2 median")
    spd.set_title("Speedup, level 2 over 0")
    # the legend below both panels, where it cannot cover a bar
    fig.legend(*lat.get_legend_handles_labels(), loc="lower center", fontsize=8,
               ncol=min(len(systems), 4))
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
