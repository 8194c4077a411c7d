"""`autofusion bench` / `python -m autofusion.benchmarks`: the side-by-side benchmark.

    autofusion bench                          # the eight zoo models, every system
    autofusion bench --models resnet50,gpt2 --out bench-out
    autofusion bench --quick                  # one small built-in model, few runs (smoke test)

Writes bench-<date>.json, .md and .png into --out, and the ONNX exports into --out/onnx/
(reused by later runs into the same directory).
"""
from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from . import models, report
from .machine import machine_info, usable_cores
from .progress import Progress
from .runner import Settings, benchmark_model
from .systems import REFERENCE, SYSTEM_NAMES, all_systems

# --precision: which systems run by default (--systems names them outright)
PRECISION_SYSTEMS = {
    "all": SYSTEM_NAMES,
    "fp32": [s.name for s in all_systems() if s.precision == "fp32"],
    "bf16": [s.name for s in all_systems() if s.precision == "bf16" or s.name == "openvino-f32"],
}

ZOO = ["resnet50", "resnet101", "bert-base", "efficientnet_b4", "vit_b_16",
       "mobilenet_v3_large", "convnext_tiny", "gpt2"]
QUICK_MODEL = "tiny_resnet"
# (full run, --quick): a --rounds/--block/--warmup given on the command line wins over both
DEFAULTS = {"rounds": (10, 3), "block": (10, 5), "warmup": (5, 2)}


def build_parser(prog: str = "autofusion bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", metavar="A,B",
                   help=f"models to run (default: {','.join(ZOO)}; also: {QUICK_MODEL})")
    p.add_argument("--systems", metavar="A,B",
                   help=f"systems to run (default all: {','.join(SYSTEM_NAMES)}); "
                        f"{REFERENCE} always runs, as the reference")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: {QUICK_MODEL} only, {DEFAULTS['rounds'][1]} rounds x "
                        f"{DEFAULTS['block'][1]} runs")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=usable_cores(),
                   help="threads for every system (default: the usable cores, %(default)s)")
    p.add_argument("--rounds", type=int, help="rounds; each runs every system for one block "
                   "(default %d, quick %d)" % DEFAULTS["rounds"])
    p.add_argument("--block", type=int, help="consecutive timed runs per block "
                   "(default %d, quick %d)" % DEFAULTS["block"])
    p.add_argument("--warmup", type=int, help="untimed runs per system before timing "
                   "(default %d, quick %d)" % DEFAULTS["warmup"])
    p.add_argument("--pause", type=float, default=0.2, metavar="SECONDS",
                   help="sleep after each block, so idle thread pools park (default %(default)s)")
    p.add_argument("--precision", choices=("fp32", "bf16", "all"), default="all",
                   help="fp32: the fp32 systems only; bf16: autofusion L2 bf16 beside OpenVINO's "
                        "default (bf16 here) and OpenVINO f32; all (default): every system")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="max|diff|/max|ref| against PyTorch eager above which a system is "
                        "marked wrong and not timed (default %(default)g)")
    p.add_argument("--out", default="bench-out", help="output directory (default %(default)s)")
    p.add_argument("--list", action="store_true", help="list the models and systems, and exit")
    return p


def parse_names(text: str | None, default: list[str], known: list[str], what: str,
                parser: argparse.ArgumentParser) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(default)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def settings_from_args(args, parser: argparse.ArgumentParser) -> Settings:
    counts = {k: getattr(args, k) if getattr(args, k) is not None else full_quick[args.quick]
              for k, full_quick in DEFAULTS.items()}
    if counts["rounds"] < 1 or counts["block"] < 1 or counts["warmup"] < 0:
        parser.error("--rounds and --block must be at least 1, --warmup at least 0")
    if args.batch < 1 or args.threads < 1:
        parser.error("--batch and --threads must be at least 1")
    model_names = parse_names(args.models, [QUICK_MODEL] if args.quick else ZOO,
                              list(models.MODELS), "model", parser)
    systems = parse_names(args.systems, PRECISION_SYSTEMS[args.precision], SYSTEM_NAMES, "system", parser)
    if REFERENCE not in systems:
        systems.append(REFERENCE)
    return Settings(models=model_names, systems=systems, batch=args.batch, threads=args.threads,
                    pause_s=args.pause, tolerance=args.tolerance, out_dir=args.out, **counts)


def pin_threads(threads: int) -> None:
    """One thread count for every system: PyTorch (eager, Inductor, autofusion's kernels) here,
    ONNX Runtime and OpenVINO through their own options (systems.py)."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:    # only settable before the first inter-op work; then it stays
        pass


def new_results(prog: str, argv: list[str], settings, reference: str, systems) -> dict:
    """The results document before any model ran: the machine, the settings, the systems."""
    return {
        "machine": machine_info(" ".join([prog, shlex.join(argv)]).strip()),
        "settings": asdict(settings),
        "reference": reference,
        "systems": [{"name": s.name, "label": s.label, "peer": s.peer, "precision": s.precision}
                    for s in systems if s.name in settings.systems],
        "models": {},
    }


def main(argv: list[str] | None = None, prog: str = "autofusion bench") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.list:
        print("models:  " + ", ".join(models.MODELS))
        print("systems: " + ", ".join(f"{s.name} ({s.label})" for s in all_systems()))
        return 0
    settings = settings_from_args(args, parser)
    pin_threads(settings.threads)
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    progress = Progress()
    results = new_results(prog, argv, settings, REFERENCE, all_systems())
    for i, name in enumerate(settings.models, 1):
        progress.step(f"model {i}/{len(settings.models)}: {name}")
        results["models"][name] = benchmark_model(name, settings, progress)
    progress.clear()

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path, md_path, png_path = (out / f"bench-{stamp}.{ext}" for ext in ("json", "md", "png"))
    report.write_json(results, json_path)
    table = report.markdown(results)
    md_path.write_text(table)
    print(table)
    print(f"wrote {json_path}, {md_path}")
    if report.write_chart(results, png_path):
        print(f"wrote {png_path}")
    else:
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)
    return 0
