"""Ratios, the markdown table and the JSON of a hand-made result (no benchmark is run)."""
import json

from autofusion.benchmarks import report


def _system(label, peer, status="ok", median=None, error=None, diff=0.0, precision="fp32"):
    return {"label": label, "peer": peer, "precision": precision, "status": status,
            "median_ms": median, "p10_ms": median and median * 0.9,
            "p90_ms": median and median * 1.1, "runs": 10 if median else 0, "compile_s": 1.0,
            "max_rel_diff": diff, "error": error, "info": {}}


def _results():
    systems = {
        "autofusion-L0": _system("autofusion L0", False, median=20.0),
        "autofusion-L2": _system("autofusion L2", False, median=10.0),
        "ort-enable-all": _system("ORT opt all", True, median=8.0),
        "torch-eager": _system("PyTorch eager", True, median=16.0),
        "inductor": _system("Inductor", True, status="wrong", error="outputs differ",
                            diff=float("inf")),
    }
    return {
        "machine": {"cpu": "test cpu", "cores": 2, "python": "3.11", "date": "today",
                    "command": "autofusion bench", "autofusion_commit": None,
                    "versions": {"torch": "t", "onnxruntime": "o", "onnx": "x", "autofusion": "a"}},
        "settings": {"threads": 2, "batch": 1, "rounds": 2, "block": 5, "warmup": 1,
                     "tolerance": 1e-3},
        "systems": [{"name": n, "label": r["label"], "peer": r["peer"]} for n, r in systems.items()],
        "models": {"m": {"status": "ok", "systems": systems},
                   "big": {"status": "skipped", "message": "needs torchvision", "systems": {}}},
    }


def test_ratios_are_speedups_of_level_2():
    m = _results()["models"]["m"]
    assert report.speedup_l2_vs_l0(m) == 2.0
    assert report.speedup_l2_vs_best_peer(m) == (0.8, "ORT opt all")   # a wrong peer never wins


def test_a_bf16_peer_is_never_the_best_peer():
    m = _results()["models"]["m"]
    m["systems"]["openvino"] = _system("OpenVINO bf16", True, median=4.0, precision="bf16")
    assert report.speedup_l2_vs_best_peer(m) == (0.8, "ORT opt all")


def test_markdown_has_a_row_per_model_and_marks_problems():
    md = report.markdown(_results())
    assert "| m | 20 | 10 | 8 | 16 | wrong (inf) | 2.00x | 0.80x (ORT opt all) |" in md
    assert "| big | skipped |" in md
    assert "- big: skipped: needs torchvision" in md
    assert "- m / Inductor: wrong: outputs differ" in md


def test_json_is_strict_even_with_infinite_differences(tmp_path):
    path = tmp_path / "r.json"
    report.write_json(_results(), path)
    data = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert data["models"]["m"]["systems"]["inductor"]["max_rel_diff"] == "inf"


def test_ratios_are_taken_round_by_round_where_the_rounds_are_known():
    m = _results()["models"]["m"]
    l0, l2 = m["systems"]["autofusion-L0"], m["systems"]["autofusion-L2"]
    l0.update(median_ms=40.0, round_ms=[20.0, 40.0, 40.0])   # round 2 slower for L0 alone
    l2.update(median_ms=10.0, round_ms=[10.0, 10.0, 20.0])
    assert report.speedup_l2_vs_l0(m) == 2.0                 # the rounds' 2, 4, 2; not 40 / 10
    l2["round_ms"] = [10.0, 10.0]                            # rounds that do not pair
    assert report.speedup_l2_vs_l0(m) == 4.0                 # the medians'
