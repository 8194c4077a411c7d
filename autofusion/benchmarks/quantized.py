"""`python -m autofusion.benchmarks.quantized`: quantized (QDQ) models, side by side.

Each model of the zoo (models.py) is exported in fp32 and quantized by ONNX Runtime's own tool
(`quantize_static`, QDQ format, int8 weights per channel, uint8 activations, calibrated on fixed
random inputs), and the same file runs on:

    autofusion L2   the int8 ops its rules make (fusion/rules/quantized.py), natively
    ORT (all)       ONNX Runtime with every optimisation (its fused QDQ kernels)
    OpenVINO        OpenVINO's CPU plugin, default settings (int8 where the file says so)

and autofusion int8 compiles the fp32 file with precision="int8", calibrated on the same inputs
the quantizer was (its own post-training quantization and guard; not the same Q/DQ graph).

    correct   each system's output against ONNX Runtime with its optimiser off (the Q/DQ graph as
              written) in steps of the output's quantization: the largest, and the share of
              values a step or more apart; top-1 and top-5 agreement over --inputs fixed inputs;
              against the fp32 model (ONNX Runtime on the fp32 file): the relative error (largest
              |Δ| over the largest magnitude) and top-1 agreement, which compares the two
              quantizations
    speed     alternating in blocks of runs over rounds (measure.py); L2 and int8 against the
              faster peer, round by round

    python -m autofusion.benchmarks.quantized --models resnet50,mobilenet_v3_large --rounds 8
    python -m autofusion.benchmarks.quantized --models resnet50 --format qoperator   # QLinearConv, QLinearAdd, …
    python -m autofusion.benchmarks.quantized --models bert-base --format dynamic    # quantize_dynamic

Files go to --out/onnx/quantized (reused), results to --out/quantized.md and .json (another
--format: --out/quantized-FORMAT.md and .json).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from ..measure import time_in_blocks
from . import timing
from .models import example_inputs, export_onnx
from .runner import short_error
from .systems import Autofusion, ModelCase, OnnxRuntime, OpenVino, as_arrays

CALIBRATION = 8   # fixed random inputs the quantizer calibrates on


FORMATS = ("qdq", "qoperator", "dynamic")


def quantized(name: str, out: Path, form: str = "qdq") -> Path:
    """The model quantized by ONNX Runtime's tool (made once, reused): static, in the QDQ or the
    QOperator format (QLinearConv, com.microsoft QLinearAdd, …), or dynamic (`quantize_dynamic`:
    int8 weights, DynamicQuantizeLinear + MatMulInteger)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.{form}.onnx"
    if path.exists():
        return path
    fp32, prepared = out / f"{name}.onnx", out / f"{name}.prepared.onnx"
    if not prepared.exists():
        export_onnx(name, fp32)
        quant_pre_process(str(fp32), str(prepared))   # what the tool asks for first (shapes, folding)
    if form == "dynamic":
        quantize_dynamic(str(prepared), str(path), weight_type=QuantType.QInt8)
        return path
    inputs = example_inputs(name, 1)

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration_sets(inputs))

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(prepared), str(path), Calibration(),
                    quant_format=QuantFormat.QOperator if form == "qoperator" else QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return path


def calibration_sets(inputs: dict[str, torch.Tensor]) -> list[dict[str, np.ndarray]]:
    """The fixed random inputs both quantizations calibrate on."""
    return [{k: _random_like(v, seed) for k, v in inputs.items()} for seed in range(CALIBRATION)]


def _random_like(t: torch.Tensor, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(t.shape).astype(np.float32) if t.is_floating_point() else t.numpy()


def output_step(path: Path) -> float | None:
    """The scale of the last DequantizeLinear before the first output: one step of it."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    made_by = {o: n for n in model.graph.node for o in n.output}
    node = made_by.get(model.graph.output[0].name)
    scale = inits.get(node.input[1]) if node is not None and node.op_type == "DequantizeLinear" else None
    return None if scale is None or scale.size != 1 else float(scale)


def first_output(system, feed: dict[str, torch.Tensor]) -> np.ndarray:
    """The system's first output for these inputs (its own feeds stay those it times)."""
    if isinstance(system, Autofusion):
        return as_arrays(system.model(**{n: feed[n] for n in system.model.input_names}))[0]
    if isinstance(system, OnnxRuntime):
        return system.session.run(None, {i.name: feed[i.name].numpy() for i in system.session.get_inputs()})[0]
    ports = {k: feed[next(n for n in port.get_names() if n in feed)].numpy()
             for k, port in enumerate(system.compiled.inputs)}
    return system.request.infer(ports).to_tuple()[0]


def agreement(outputs: list[np.ndarray], reference: list[np.ndarray], k: int) -> float:
    """The share of inputs whose top-k classes (as a set) match the reference's."""
    same = [set(np.argsort(-o.reshape(-1))[:k]) == set(np.argsort(-r.reshape(-1))[:k])
            for o, r in zip(outputs, reference)]
    return float(np.mean(same))


def run_model(name: str, out: Path, args) -> dict:
    path = quantized(name, out / "onnx" / "quantized", args.format)
    inputs = example_inputs(name, 1)
    row: dict = {"model": name + ("" if args.format == "qdq" else f" ({args.format})"), "file": str(path), "errors": {},
                 "compile_s": {}, "correct": {}}
    case = ModelCase(name, str(path), inputs, None, args.threads)
    fp32_case = ModelCase(name, str(path.parent / f"{name}.onnx"), inputs, None, args.threads)
    systems = {"ORT (off)": OnnxRuntime("ORT_DISABLE_ALL"), "fp32": OnnxRuntime("ORT_DISABLE_ALL"),
               "ORT (all)": OnnxRuntime("ORT_ENABLE_ALL"), "autofusion L2": Autofusion(2),
               "OpenVINO": OpenVino("default")}
    if args.format == "qdq":   # its own static quantization, beside the quantizer's
        systems["autofusion int8"] = Autofusion(2, precision="int8", calibration=calibration_sets(inputs))
    of_fp32 = {"fp32", "autofusion int8"}   # compiled from the fp32 file
    feeds = [{k: torch.from_numpy(_random_like(v, 100 + i)) for k, v in inputs.items()} for i in range(args.inputs)]
    step = output_step(path) if args.format != "dynamic" else None   # the last DequantizeLinear's scale
    answers, ready = {}, {}
    for label, system in systems.items():
        try:
            system.load(fp32_case if label in of_fp32 else case)
            start = time.perf_counter()
            system.compile()
            row["compile_s"][label] = round(time.perf_counter() - start, 3)
            answers[label] = [first_output(system, feed) for feed in feeds]   # the same inputs for all
        except Exception as e:  # noqa: BLE001 - one system's failure is a result, the others go on
            row["errors"][label] = short_error(e)
            continue
        if label not in ("ORT (off)", "fp32"):
            ready[label] = system.run
        if label.startswith("autofusion"):
            row["plan" if label == "autofusion L2" else "plan int8"] = system.model.plan.summary()
        if label == "autofusion int8":
            q = system.model.report.precision.get("int8", {})
            row["int8"] = {"checked": len(q.get("checked", ())),
                           "kept_float": [c["node"] for c in q.get("checked", ()) if c["kept_float"]]}
    reference, fp32 = answers.get("ORT (off)"), answers.get("fp32")
    row["vs_fp32"] = {label: {"rel_error": round(max(_relative(o, r) for o, r in zip(outs, fp32)), 5),
                              "top1": agreement(outs, fp32, 1)}
                      for label, outs in answers.items() if fp32 is not None and label != "fp32"}
    for label, outs in answers.items():
        if reference is None or label in of_fp32 or label == "ORT (off)":
            continue
        diff = np.concatenate([np.abs(o.astype(np.float64) - r).reshape(-1) for o, r in zip(outs, reference)])
        row["correct"][label] = {
            "max_steps": None if step is None else round(float(diff.max() / step), 3),
            "share_a_step_apart": None if step is None else round(float((diff > step / 2).mean()), 5),
            "top1": agreement(outs, reference, 1), "top5": agreement(outs, reference, 5)}
    times = time_in_blocks(ready, rounds=args.rounds, block=args.block, warmup=args.warmup, pause_s=0.2,
                           describe_error=short_error)
    rounds = {k: timing.round_medians(v, args.block) for k, v in times.samples.items() if v}
    row["median_ms"] = {k: round(float(np.median(v)), 3) for k, v in rounds.items()}
    for label, key in (("autofusion L2", "vs_best_peer"), ("autofusion int8", "int8_vs_best_peer")):
        vs = timing.against_faster(rounds, label, ("ORT (all)", "OpenVINO"))
        if vs is not None:
            row[key] = round(vs, 3)
    row["errors"].update(times.errors)
    return row


def _relative(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(y.astype(np.float64) - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def table(rows: list[dict]) -> str:
    lines = ["| model | autofusion L2 | autofusion int8 | ORT (all) | OpenVINO | L2 vs best | int8 vs best | "
             "L2 max steps | L2 top-1 | ORT (all) max steps | top-1 vs fp32: int8 / ORT (all) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ms, ok, vs = r.get("median_ms", {}), r.get("correct", {}), r.get("vs_fp32", {})
        cell = lambda d, k: "-" if d.get(k) is None else f"{d[k]:.2f}"   # noqa: E731
        lines.append(f"| {r['model']} | {cell(ms, 'autofusion L2')} | {cell(ms, 'autofusion int8')} | "
                     f"{cell(ms, 'ORT (all)')} | {cell(ms, 'OpenVINO')} | {r.get('vs_best_peer', '-')}x | "
                     f"{r.get('int8_vs_best_peer', '-')}x | "
                     f"{ok.get('autofusion L2', {}).get('max_steps', '-')} | "
                     f"{ok.get('autofusion L2', {}).get('top1', '-')} | "
                     f"{ok.get('ORT (all)', {}).get('max_steps', '-')} | "
                     f"{vs.get('autofusion int8', {}).get('top1', '-')} / {vs.get('ORT (all)', {}).get('top1', '-')} |")
    return "\n".join(lines)


ROW = "quantized row: "


def in_child(name: str, args) -> dict:
    """One model quantized in a process of its own, then measured in another: what a process
    did before slowed autofusion's runs after it (a model exported and quantized in the same
    process: EfficientNet-B4 61 ms against 30, the cause not found; MobileNetV3-L after
    ResNet-50's systems: 17 ms against 2.4)."""
    common = ["--out", str(args.out)]
    common += ["--format", args.format]
    subprocess.run([sys.executable, "-m", "autofusion.benchmarks.quantized", "--prepare", name, *common],
                   capture_output=True, text=True)
    command = [sys.executable, "-m", "autofusion.benchmarks.quantized", "--one", name, *common,
               "--threads", str(args.threads), "--rounds", str(args.rounds), "--block", str(args.block),
               "--warmup", str(args.warmup), "--inputs", str(args.inputs)]
    done = subprocess.run(command, capture_output=True, text=True)
    found = [line[len(ROW):] for line in done.stdout.splitlines() if line.startswith(ROW)]
    if not found:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "skipped": f"the benchmark process failed: {tail}"}
    return json.loads(found[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenet_v3_large")
    p.add_argument("--out", type=Path, default=Path("benchmark-results"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--inputs", type=int, default=16, help="fixed random inputs for correctness and agreement")
    p.add_argument("--format", choices=FORMATS, default="qdq",
                   help="how ONNX Runtime's tool quantizes: static QDQ (default, with autofusion's own "
                        "precision=int8 beside it), static QOperator, or dynamic")
    p.add_argument("--one", help=argparse.SUPPRESS)   # the child process measuring one model
    p.add_argument("--prepare", help=argparse.SUPPRESS)   # the child process quantizing one model
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.prepare:
        quantized(args.prepare, args.out / "onnx" / "quantized", args.format)
        return
    if args.one:
        try:
            row = run_model(args.one, args.out, args)
        except Exception as e:  # noqa: BLE001 - a model that cannot be built is a result
            row = {"model": args.one, "skipped": short_error(e)}
        print(ROW + json.dumps(row), flush=True)
        return
    rows = []
    for name in args.models.split(","):
        rows.append(in_child(name, args))
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "quantized" if args.format == "qdq" else f"quantized-{args.format}"
    (args.out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    (args.out / f"{stem}.md").write_text(table([r for r in rows if "skipped" not in r]) + "\n")
    print(table([r for r in rows if "skipped" not in r]))


if __name__ == "__main__":
    main()
