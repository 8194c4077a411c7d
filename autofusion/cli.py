"""The `autofusion` command line: run and inspect models."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from . import progress
from .errors import AutofusionError
from .ir.feeds import random_feeds


def _load_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise AutofusionError(f"{path}: cannot read inputs (expected an .npz file): {e}") from None


def _parse_dims(items: list[str]) -> dict[str, int]:
    dims = {}
    for item in items:
        name, _, size = item.partition("=")
        if not size.isdigit():
            raise AutofusionError(f"--dim expects NAME=SIZE, got {item!r}")
        dims[name] = int(size)
    return dims


def defaulted_dims(graph, dims: dict[str, int]) -> list[str]:
    """The symbolic dims of the graph's inputs that random inputs give the default size 1."""
    names = dict.fromkeys(d for v in graph.inputs for d in v.shape or () if isinstance(d, str))
    return [d for d in names if d not in dims]


def _with_dims_hint(e: AutofusionError, defaulted: list[str]) -> AutofusionError:
    """The error of a run on random inputs, saying which sizes were guessed and how to set them."""
    sizes = ", ".join(f"{d}=1" for d in defaulted)
    return AutofusionError(f"{e}\n(random inputs used the default size 1 for the symbolic "
                           f"dimension(s) {sizes}; the model may need real sizes: set each with "
                           f"--dim NAME=SIZE, e.g. --dim {defaulted[-1]}=320)")


def _checksum(a: np.ndarray) -> str:
    if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.number):
        a64 = a.astype(np.float64)
        return f"sum={a64.sum():.6g} mean|x|={np.abs(a64).mean() if a.size else 0:.6g}"
    return "(non-numeric)"


def _feeds(args, graph) -> tuple[dict[str, np.ndarray], list[str]]:
    """The inputs of --inputs, or random ones of --dim's sizes; and the sizes that defaulted."""
    if args.inputs:
        return _load_inputs(args.inputs), []
    dims = _parse_dims(args.dim)
    return random_feeds(graph, dims, args.seed), defaulted_dims(graph, dims)


def cmd_run(args) -> int:
    model = _compile(args)
    if args.plan:
        print(model.plan)
    feeds, defaulted = _feeds(args, model.graph)
    try:
        with progress.step("running"):
            outs = model.run(feeds)
    except AutofusionError as e:
        if not defaulted:
            raise
        raise _with_dims_hint(e, defaulted) from e
    print(f"{args.model}: {model.report.ops_before} nodes, {len(model.graph)} after fusion "
          f"(level {model.report.level})")
    for name, a in outs.items():
        print(f"  {name}: {a.dtype}{list(a.shape)}  {_checksum(a)}")
    if args.compare_ort:
        import onnxruntime as ort
        sess = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"])
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        print("compared with ONNX Runtime:")
        for name, a in outs.items():
            r = ref[name]
            diff = np.abs(a.astype(np.float64) - r.astype(np.float64)) if a.size else np.zeros(1)
            scale = max(float(np.abs(r.astype(np.float64)).max()) if r.size else 0.0, 1e-30)
            print(f"  {name}: max abs diff {diff.max():.3g}, max rel diff {diff.max() / scale:.3g}")
    return 0


def _require_dot(args) -> None:
    """Before the compile: with --html, a missing Graphviz fails at once."""
    if args.html:
        from .export.graphviz import find_dot
        find_dot()


def cmd_compile(args) -> int:
    import autofusion
    _require_dot(args)
    model = _compile(args)
    if args.measure:
        from .measure import measure_speedup
        feeds = random_feeds(model.graph, _parse_dims(args.dim), args.seed)
        unfused = _compile(args, level=0)
        with progress.step("measuring fused against level 0"):
            model.report.measured = measure_speedup(unfused, model, feeds)
    print(model.report.text())
    if args.plan:
        print(model.plan)
    if args.output:
        autofusion.export_onnx(model.graph, args.output)
        print(f"wrote {args.output}")
    if args.report:
        Path(args.report).write_text(model.report.dumps())
        print(f"wrote {args.report}")
    if args.html:
        with progress.step("drawing the HTML report"):
            autofusion.export_html(model, args.html, original=args.model)
        print(f"wrote {args.html}")
    if args.dump_kernels:
        from .export import dump_kernels
        written = dump_kernels(model.graph, args.dump_kernels)
        print(f"wrote {len(written) // 2} region kernel(s) to {args.dump_kernels}")
    return 0


def cmd_profile(args) -> int:
    import autofusion
    _require_dot(args)
    model = _compile(args)
    feeds, defaulted = _feeds(args, model.graph)
    try:
        with progress.step(f"profiling: {args.runs} runs with profiling off, {args.runs} on"):
            prof = autofusion.profile(model, feeds, runs=args.runs)
    except AutofusionError as e:
        if not defaulted:
            raise
        raise _with_dims_hint(e, defaulted) from e
    if args.plan:
        print(prof.plan)   # the plan the runs took: specialised to the inputs' sizes
    print(prof.text(top=args.top))
    if args.html:
        with progress.step("drawing the HTML report"):
            autofusion.export_html(model, args.html, original=args.model, profile=prof)
        print(f"wrote {args.html}")
    return 0


def cmd_rules(args) -> int:
    from .fusion import RULES
    width = max(len(r.name) for r in RULES)
    print(f"{'name':<{width}}  level  description")
    for r in RULES:
        print(f"{r.name:<{width}}  {r.level:>5}  {r.description}")
    return 0


def cmd_info(args) -> int:
    import onnx

    from .backend import KERNELS
    from .frontend import load_model
    from .frontend.onnx_values import value_type
    from .frontend.onnx_runtime_groups import bodies_run_here
    from .ir import op_key

    model = load_model(args.model)
    g = model.graph
    print(f"{args.model}: graph {g.name!r}, {len(g.node)} nodes, opset "
          + ", ".join(f"{i.domain or 'ai.onnx'} {i.version}" for i in model.opset_import))
    inits = {t.name for t in g.initializer}

    def fmt(vi):
        shape, dtype = value_type(vi)
        dims = "..." if shape is None else ",".join("?" if d is None else str(d) for d in shape)
        return f"{vi.name}: {dtype.name.lower() if dtype else '?'}[{dims}]"

    print("inputs:")
    for vi in g.input:
        if vi.name not in inits:
            print(f"  {fmt(vi)}")
    print("outputs:")
    for vi in g.output:
        print(f"  {fmt(vi)}")
    size = sum(int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
               for t in g.initializer)   # from the header: no weight is decoded
    print(f"constants: {len(inits)} initializers, {size / 1e6:.1f} MB")
    hist: dict[str, int] = {}
    elsewhere: dict[str, list[str]] = {}   # ops without a kernel here: ONNX Runtime runs them
    types = {vi.name: vi.type for vi in [*g.value_info, *g.input, *g.output]}
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 21)
    for i, n in enumerate(g.node):
        key = op_key(n.domain, n.op_type)
        hist[key] = hist.get(key, 0) + 1
        subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                       for a in n.attribute)   # If, Loop, Scan run here unless a body cannot
        if (key not in KERNELS or subgraph and not bodies_run_here(n, types, opset)) and key != "Constant":
            elsewhere.setdefault(key, []).append(n.name or f"#{i}")
    print("operators:")
    for key, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {count:5d}  {key}{'   (ONNX Runtime)' if key in elsewhere else ''}")
    if elsewhere:
        print("runs on ONNX Runtime (no kernel here; --strict refuses these):")
        for key, names in sorted(elsewhere.items()):
            print(f"  {key}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    else:
        print("every operator has a kernel here")
    return 0


def cmd_bench(args) -> int:
    from .benchmarks.cli import main as bench_main
    return bench_main(args.args)


def _fusion_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", type=int, choices=(0, 1, 2), default=None,
                   help="fusion level: 0 none, 1 basic, 2 all (default: $AUTOFUSION_LEVEL or 2)")
    p.add_argument("--disable", default=None, metavar="A,B",
                   help="fused-op names to leave unfused (default: $AUTOFUSION_DISABLE)")
    p.add_argument("--backend", choices=("auto", "native", "torch"), default=None,
                   help="what runs the fused graph: native C++ over oneDNN where it can (auto, the "
                        "default: $AUTOFUSION_BACKEND), native or an error, or PyTorch kernels only")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every kernel (default: as PyTorch has it, the usable cores)")
    p.add_argument("--streams", type=int, default=None, metavar="N",
                   help="calls from different threads that run at once, the threads split among "
                        "them (default: $AUTOFUSION_STREAMS or 1, latency: one call at a time)")
    p.add_argument("--plan", action="store_true",
                   help="print the plan: each node's implementation and why, partitions, layouts")
    p.add_argument("--max-region-nodes", type=int, default=None, metavar="N",
                   help="most ops in one automatic fusion region (default: "
                        "$AUTOFUSION_MAX_REGION_NODES or 1024)")
    p.add_argument("--max-region-inputs", type=int, default=None, metavar="N",
                   help="most tensors one region reads (default: $AUTOFUSION_MAX_REGION_INPUTS or 32)")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16", "int8"), default=None,
                   help="what convolutions and products compute in (default: $AUTOFUSION_PRECISION "
                        "or fp32); bf16/fp16/int8 are checked per node by the precision guard")
    p.add_argument("--calibrate", metavar="INPUTS.npz", default=None, nargs="+",
                   help="the precision guard's calibration inputs, one .npz per input set "
                        "(default: random); int8's ranges are over all of them")
    p.add_argument("--calibration-method", choices=("minmax", "percentile"), default=None,
                   help="int8's activation ranges: smallest to largest value (minmax, the default) or "
                        "the 0.01st to 99.99th percentile")
    p.add_argument("--tolerance", type=float, default=None,
                   help="the guard's per-node error bound: bf16, relative to each output's largest "
                        "magnitude (default 2e-2); int8, relative RMS (default 5e-2)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress line on stderr for long work (default: $AUTOFUSION_PROGRESS, "
                        "else only where stderr is a terminal)")


def _compile(args, level=None):
    import autofusion
    with progress.step(f"compiling {Path(args.model).name}" + (" at level 0" if level == 0 else "")):
        return autofusion.compile(args.model, level=args.level if level is None else level,
                                  disable=args.disable, backend=args.backend, threads=args.threads,
                                  max_region_nodes=args.max_region_nodes,
                                  max_region_inputs=args.max_region_inputs,
                                  precision=args.precision, calibration=_calibration(args.calibrate),
                                  tolerance=args.tolerance, strict=args.strict, streams=args.streams,
                                  calibration_method=args.calibration_method)


def _calibration(files: list[str] | None):
    """One .npz: one input set; several: a list of them."""
    return files[0] if files and len(files) == 1 else files


def _strict_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="refuse ops autofusion has no kernel for, instead of running them on "
                        "ONNX Runtime")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autofusion", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="compile and run a model on random or given inputs")
    run.add_argument("model", type=Path)
    run.add_argument("--inputs", help=".npz file with one array per model input")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="size of a symbolic dimension for random inputs (default 1)")
    run.add_argument("--seed", type=int, default=0)
    _fusion_flags(run)
    _strict_flag(run)
    run.add_argument("--compare-ort", action="store_true",
                     help="also run ONNX Runtime and print the max abs/rel difference")
    run.set_defaults(fn=cmd_run)

    comp = sub.add_parser("compile", help="fuse a model, print the fusion report, write the fused file")
    comp.add_argument("model", type=Path)
    comp.add_argument("-o", "--output", type=Path, help="write the fused model as ONNX")
    comp.add_argument("--report", type=Path, help="write the fusion report as JSON")
    comp.add_argument("--html", type=Path, metavar="FILE",
                      help="write the report as one self-contained HTML page: the graph before "
                           "and after fusion, the fused groups, the reasons (needs Graphviz's dot)")
    comp.add_argument("--dump-kernels", type=Path, metavar="DIR",
                      help="write each automatic fusion region's subgraph (.onnx) and generated "
                           "C++ (.cpp) into DIR")
    comp.add_argument("--measure", action="store_true",
                      help="also time the fused model against level 0 on random inputs")
    comp.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                      help="size of a symbolic dimension for --measure (default 1)")
    comp.add_argument("--seed", type=int, default=0)
    _fusion_flags(comp)
    _strict_flag(comp)
    comp.set_defaults(fn=cmd_compile)

    prof = sub.add_parser("profile", help="run a model and report the time of each node, the "
                                          "slowest first (--html: the fused graph by time)")
    prof.add_argument("model", type=Path)
    prof.add_argument("--inputs", help=".npz file with one array per model input")
    prof.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                      help="size of a symbolic dimension for random inputs (default 1)")
    prof.add_argument("--seed", type=int, default=0)
    prof.add_argument("--runs", type=int, default=50,
                      help="runs with profiling off and as many on, alternating in blocks of 5 "
                           "(default 50)")
    prof.add_argument("--top", type=int, default=20, help="nodes the table lists (default 20)")
    prof.add_argument("--html", type=Path, metavar="FILE",
                      help="also write the HTML report with the fused graph filled by time "
                           "(needs Graphviz's dot)")
    _fusion_flags(prof)
    _strict_flag(prof)
    prof.set_defaults(fn=cmd_profile)

    rules = sub.add_parser("rules", help="list every fusion rule: name, level, description")
    rules.set_defaults(fn=cmd_rules)

    info = sub.add_parser("info", help="inputs, outputs, operator histogram, ops run on ONNX Runtime")
    info.add_argument("model", type=Path)
    info.set_defaults(fn=cmd_info)

    # Every argument after `bench` goes to the benchmarks' own parser (`autofusion bench --help`
    # shows its options). prefix_chars="+" keeps this subparser from reading "--quick" etc. as
    # options of its own: argparse's REMAINDER does not capture a leading "--option".
    bench = sub.add_parser("bench", add_help=False, prefix_chars="+",
                           help="benchmark autofusion against ONNX Runtime, PyTorch eager and "
                                "torch.compile (see BENCHMARKS.md); --quick for a smoke run")
    bench.add_argument("args", nargs=argparse.REMAINDER)
    bench.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure(getattr(args, "progress", None))
    try:
        return args.fn(args)
    except AutofusionError as e:
        print(f"autofusion: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
