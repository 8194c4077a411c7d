"""`python -m autofusion.benchmarks.micro`: two synthetic ONNX models, each isolating one cost.

    elementwise-chain  200 small elementwise ops (Add and Mul of constants, Relu, Sigmoid, in
                       turn) on a [1, 64] tensor: next to no arithmetic, so at level 0 the
                       median / 200 is the executor's overhead per node (target: <= 2 us)
    conv-chain         64 blocks of 1x1 Conv(64->64, bias) + BatchNormalization + Relu on
                       1x64x14x14: level 2's fused convolutions against the faster of ONNX
                       Runtime and OpenVINO f32
    elementwise-8      8 elementwise ops (SiLU, a per-channel add, Relu, a scale, Tanh, a
                       residual subtract, Abs) on 1x64x112x112: one automatic fusion region
                       against the same ops one by one (level 2 without regions; target 3x)

    python -m autofusion.benchmarks.micro                          # both models, every system
    python -m autofusion.benchmarks.micro --models conv-chain --rounds 20

The models are built with onnx.helper (seeded random weights) and written to <out>/onnx/. Each
system's outputs are checked against ONNX Runtime's (ORT_ENABLE_ALL) before it is timed, and the
systems alternate in blocks as in the main suite (runner.py, timing.py). Writes
micro-<date>.json and .md into --out and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from . import report
from .cli import new_results, parse_names, pin_threads
from .machine import usable_cores
from .progress import Progress
from .runner import Settings, run_case
from .systems import Autofusion, ModelCase, OnnxRuntime, OpenVino, System

SEED = 0
OPSET = 17
ELEMENTWISE_OPS = ("Add", "Mul", "Relu", "Sigmoid")   # Add and Mul take a constant
L0_SYSTEMS = ("autofusion-L0", "autofusion-L0-torch")   # whose time per node is the overhead


# ---- the models ----------------------------------------------------------------------------

def elementwise_chain(length: int = 200, width: int = 64) -> onnx.ModelProto:
    """x [1, width] through `length` elementwise ops, ELEMENTWISE_OPS in turn."""
    rng = np.random.default_rng(SEED)
    nodes, constants, value = [], [], "x"
    for i in range(length):
        op = ELEMENTWISE_OPS[i % len(ELEMENTWISE_OPS)]
        inputs = [value]
        if op in ("Add", "Mul"):
            low, high = (-0.5, 0.5) if op == "Add" else (0.5, 1.5)
            constants.append(_constant(f"c{i}", rng.uniform(low, high, width)))
            inputs.append(f"c{i}")
        value = "y" if i == length - 1 else f"t{i}"
        nodes.append(helper.make_node(op, inputs, [value], name=f"{op}_{i}"))
    return _model("elementwise-chain", nodes, constants, [1, width])


def conv_chain(blocks: int = 64, channels: int = 64, size: int = 14) -> onnx.ModelProto:
    """x [1, channels, size, size] through `blocks` x (1x1 Conv with bias, BatchNormalization,
    Relu). He-scaled weights and near-identity BatchNorm statistics keep the activations
    within a few orders of magnitude over the whole chain (at 64 blocks: mean ~13, max ~260)."""
    rng = np.random.default_rng(SEED)
    nodes, constants, value = [], [], "x"
    for i in range(blocks):
        params = {
            "w": rng.normal(0, np.sqrt(2 / channels), (channels, channels, 1, 1)),
            "b": rng.normal(0, 0.1, channels),
            "scale": rng.uniform(0.8, 1.2, channels),
            "bias": rng.normal(0, 0.1, channels),
            "mean": rng.normal(0, 0.1, channels),
            "var": rng.uniform(0.5, 1.5, channels),       # positive, as a running variance is
        }
        constants += [_constant(f"{k}{i}", v) for k, v in params.items()]
        out = "y" if i == blocks - 1 else f"relu{i}"
        nodes += [
            helper.make_node("Conv", [value, f"w{i}", f"b{i}"], [f"conv{i}"], name=f"Conv_{i}"),
            helper.make_node("BatchNormalization",
                             [f"conv{i}", f"scale{i}", f"bias{i}", f"mean{i}", f"var{i}"],
                             [f"bn{i}"], name=f"BatchNormalization_{i}"),
            helper.make_node("Relu", [f"bn{i}"], [out], name=f"Relu_{i}"),
        ]
        value = out
    return _model("conv-chain", nodes, constants, [1, channels, size, size])


def elementwise_8(channels: int = 64, size: int = 112) -> onnx.ModelProto:
    """x [1, channels, size, size] through 8 elementwise ops no rule fuses into one kernel."""
    rng = np.random.default_rng(SEED)
    constants = [_constant("shift", rng.normal(0, 0.1, (1, channels, 1, 1))),
                 _constant("half", np.array(0.5))]
    steps = [("Sigmoid", ["x"]), ("Mul", ["x", "t0"]), ("Add", ["t1", "shift"]), ("Relu", ["t2"]),
             ("Mul", ["t3", "half"]), ("Tanh", ["t4"]), ("Sub", ["t5", "x"]), ("Abs", ["t6"])]
    nodes = [helper.make_node(op, ins, ["y" if i == len(steps) - 1 else f"t{i}"], name=f"{op}_{i}")
             for i, (op, ins) in enumerate(steps)]
    return _model("elementwise-8", nodes, constants, [1, channels, size, size])


MODELS = {"elementwise-chain": elementwise_chain, "conv-chain": conv_chain,
          "elementwise-8": elementwise_8}


def _constant(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(values.astype(np.float32), name)


def _model(name: str, nodes, constants, shape: list[int]) -> onnx.ModelProto:
    """One float32 input x and one output y of the same shape."""
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def example_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 arrays for the model's (static-shaped) inputs."""
    rng = np.random.default_rng(SEED)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim],
                                        dtype=np.float32)
            for i in model.graph.input}


# ---- the systems ---------------------------------------------------------------------------

def micro_systems() -> list[System]:
    """Fresh instances, in table-column order: ours first, then the fp32 peers."""
    return [Autofusion(0), Autofusion(0, backend="torch"),
            Autofusion(2), Autofusion(2, without=("regions",)), Autofusion(2, backend="torch"),
            OnnxRuntime("ORT_ENABLE_ALL"), OpenVino("fp32")]


SYSTEM_NAMES = [s.name for s in micro_systems()]
REFERENCE = OnnxRuntime("ORT_ENABLE_ALL").name   # every system's outputs are checked against it


# ---- running -------------------------------------------------------------------------------

def benchmark(name: str, settings: Settings, progress: Progress) -> dict:
    """One micro model's result: as the main suite's (report.py), plus its node count and, for
    the elementwise chain, each level-0 system's time per node."""
    model = MODELS[name]()
    path = Path(settings.out_dir) / "onnx" / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    inputs = {k: torch.from_numpy(v) for k, v in example_inputs(model).items()}
    case = ModelCase(name, str(path), inputs, build=None, threads=settings.threads)
    systems = [s for s in micro_systems() if s.name in settings.systems]
    results = run_case(case, systems, settings, progress, reference=REFERENCE)
    result = {"status": "ok", "onnx": str(path), "nodes": len(model.graph.node),
              "inputs": {k: list(v.shape) for k, v in inputs.items()}, "systems": results}
    if name == "elementwise-chain":
        result["us_per_node"] = {s: results[s]["median_ms"] * 1e3 / result["nodes"]
                                 for s in L0_SYSTEMS
                                 if s in results and results[s]["status"] == "ok"}
    return result


def notes(results: dict) -> list[str]:
    """The two numbers each model is for, one line each."""
    lines = []
    chain = results["models"].get("elementwise-chain")
    if chain and chain.get("us_per_node"):
        labels = {s["name"]: s["label"] for s in results["systems"]}
        per_node = ", ".join(f"{labels[s]} {us:.2f} us" for s, us in chain["us_per_node"].items())
        lines.append(f"elementwise-chain: executor overhead per node (level-0 median / "
                     f"{chain['nodes']} nodes): {per_node}; target <= 2 us")
    conv = results["models"].get("conv-chain")
    ratio = conv and report.speedup_l2_vs_best_peer(conv)
    if ratio:
        lines.append(f"conv-chain: autofusion L2 vs the faster of ORT opt all and OpenVINO f32: "
                     f"{ratio[0]:.2f}x ({ratio[1]})")
    ew = results["models"].get("elementwise-8")
    times = ew and {k: v.get("median_ms") for k, v in ew["systems"].items() if v.get("status") == "ok"}
    if times and times.get("autofusion-L2") and times.get("autofusion-L2-noregions"):
        lines.append(f"elementwise-8: one generated kernel vs its ops one by one (L2 without "
                     f"regions): {times['autofusion-L2-noregions'] / times['autofusion-L2']:.2f}x; "
                     "target >= 3x")
    return lines


# ---- command line --------------------------------------------------------------------------

def build_parser(prog: str = "python -m autofusion.benchmarks.micro") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", metavar="A,B", help=f"models to run (default: {','.join(MODELS)})")
    p.add_argument("--systems", metavar="A,B",
                   help=f"systems to run (default all: {','.join(SYSTEM_NAMES)}); "
                        f"{REFERENCE} always runs, as the reference")
    p.add_argument("--threads", type=int, default=usable_cores(),
                   help="threads for every system (default: the usable cores, %(default)s)")
    p.add_argument("--rounds", type=int, default=10,
                   help="rounds; each runs every system for one block (default %(default)s)")
    p.add_argument("--block", type=int, default=20,
                   help="consecutive timed runs per block (default %(default)s)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed runs per system before timing (default %(default)s)")
    p.add_argument("--pause", type=float, default=0.2, metavar="SECONDS",
                   help="sleep after each block, so idle thread pools park (default %(default)s)")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="max|diff|/max|ref| against ONNX Runtime above which a system is "
                        "marked wrong and not timed (default %(default)g)")
    p.add_argument("--out", default="bench-out", help="output directory (default %(default)s)")
    return p


def settings_from_args(args, parser: argparse.ArgumentParser) -> Settings:
    if args.rounds < 1 or args.block < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--rounds, --block and --threads must be at least 1, --warmup at least 0")
    model_names = parse_names(args.models, list(MODELS), list(MODELS), "model", parser)
    systems = parse_names(args.systems, SYSTEM_NAMES, SYSTEM_NAMES, "system", parser)
    if REFERENCE not in systems:
        systems.append(REFERENCE)
    return Settings(models=model_names, systems=systems, batch=1, threads=args.threads,
                    rounds=args.rounds, block=args.block, warmup=args.warmup,
                    pause_s=args.pause, tolerance=args.tolerance, out_dir=args.out)


def main(argv: list[str] | None = None, prog: str = "python -m autofusion.benchmarks.micro") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    settings = settings_from_args(parser.parse_args(argv), parser)
    pin_threads(settings.threads)
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    progress = Progress()
    results = new_results(prog, argv, settings, REFERENCE, micro_systems())
    for name in settings.models:
        results["models"][name] = benchmark(name, settings, progress)
    progress.clear()

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path, md_path = out / f"micro-{stamp}.json", out / f"micro-{stamp}.md"
    report.write_json(results, json_path)
    table = report.markdown(results, title="autofusion microbenchmarks", notes=notes(results))
    md_path.write_text(table)
    print(table)
    print(f"wrote {json_path}, {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
