"""`python -m autofusion.benchmarks.onnx_suites`: ONNX's backend test data, every suite, on ONNX Runtime and
on autofusion with the fallback off (strict=True), compared as ONNX's backend runner compares.

    python -m autofusion.benchmarks.onnx_suites                          # autofusion at level 0, and ORT
    python -m autofusion.benchmarks.onnx_suites --level 0 2 --out FILE.md
    python -m autofusion.benchmarks.onnx_suites --only 'test_optional_' --suite node

The suites are the ones `onnx.backend.test.BackendTest` runs, from the onnx wheel: the node cases
its generators build (`onnx.backend.test.case.node`), and the data directories pytorch-converted,
pytorch-operator, simple and real (the "light" models: `data/real/*/data.json` point at
`data/light/light_*.onnx`, which the wheel ships with their expected outputs; the inputs are the
runner's own dummy data). A case is in scope when every tensor type in it — graph inputs and
outputs (inside sequences, optionals and maps too), initializers, tensor attributes, subgraphs —
is a standard dtype (float16/32/64, int8-64, uint8-64, bool); the op does not matter.

Each case runs through the runner's own test function (so its data, tolerances — rtol 1e-3,
atol 1e-7 unless the case says otherwise — and dtype and shape checks are ONNX's), in a worker
process: a case that crashes the worker or runs past `--timeout` is recorded as such, the worker
is replaced, and the run goes on.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx.backend.test.runner import Runner

# the suites, in the order the report lists them: loader kind -> runner category
SUITES = {"node": "Node", "pytorch-converted": "PyTorchConverted",
          "pytorch-operator": "PyTorchOperator", "simple": "Simple", "real": "Real"}

STANDARD = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
            onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
            onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
            onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


@dataclass(frozen=True)
class Case:
    suite: str          # loader kind
    name: str           # e.g. "test_relu"
    ops: tuple          # op keys of the graph ("Relu", "ai.onnx.ml::Scaler")
    test: object = field(default=None, compare=False, repr=False)   # the loader's TestCase


@dataclass(frozen=True)
class Outcome:
    case: Case
    system: str
    passed: bool
    message: str = ""   # first line of the failure


# ---- which cases ----------------------------------------------------------------------------

def element_types(t: onnx.TypeProto):
    """Every tensor element type a TypeProto holds (through sequences, optionals and maps)."""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(t, kind).elem_type
    elif kind == "sequence_type":
        yield from element_types(t.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from element_types(t.optional_type.elem_type)
    elif kind == "map_type":
        yield t.map_type.key_type
        yield from element_types(t.map_type.value_type)


def graph_types(g: onnx.GraphProto):
    """Every element type a graph reads, makes or declares, its subgraphs included."""
    for vi in [*g.input, *g.output, *g.value_info]:
        yield from element_types(vi.type)
    for t in g.initializer:
        yield t.data_type
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t.data_type
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from (t.data_type for t in a.tensors)
            elif a.type == onnx.AttributeProto.TYPE_PROTO:
                yield from element_types(a.tp)
            elif a.type == onnx.AttributeProto.TYPE_PROTOS:
                for tp in a.type_protos:
                    yield from element_types(tp)
            for sub in [a.g] if a.HasField("g") else a.graphs:
                yield from graph_types(sub)


def in_scope(model: onnx.ModelProto) -> bool:
    return all(t in STANDARD for t in graph_types(model.graph))


def op_keys(model: onnx.ModelProto) -> tuple:
    keys = dict.fromkeys(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                         for n in model.graph.node)
    return tuple(keys)


def case_model(case) -> onnx.ModelProto:
    """The model of a loader TestCase: built in memory (node), in its directory, or the light
    file its url names (real)."""
    if case.model is not None:
        return case.model
    if case.model_dir is not None:
        return onnx.load(os.path.join(case.model_dir, "model.onnx"))
    wheel = Path(onnx.__file__).parent.parent
    return onnx.load(str(wheel / case.url))


def discover(suites=tuple(SUITES), only: str | None = None) -> tuple[list[Case], dict[str, int]]:
    """The in-scope cases of the suites, and per suite how many cases it has in all."""
    import re

    from onnx.backend.test.loader import load_model_tests
    cases, totals = [], {}
    for suite in suites:
        tests = load_model_tests(kind=suite)
        totals[suite] = len(tests)
        for t in sorted(tests, key=lambda t: t.name):
            if only and not re.search(only, t.name):
                continue
            model = case_model(t)
            if in_scope(model):
                cases.append(Case(suite, t.name, op_keys(model), t))
    return cases, totals


# ---- the systems, as onnx backends ----------------------------------------------------------

def backend_for(system: str):
    """An onnx.backend.base.Backend for 'ort' or 'autofusion-L<level>' (strict)."""
    if system == "ort":
        import onnxruntime.backend
        return onnxruntime.backend.backend.OnnxRuntimeBackend
    return autofusion_backend(int(system.rsplit("L", 1)[1]), strict=True)


def autofusion_backend(level: int, strict: bool):
    """autofusion at this level as an onnx.backend.base.Backend (ONNX's runner calls it)."""
    import numpy as np
    import onnx.backend.base

    import autofusion

    class Rep(onnx.backend.base.BackendRep):
        def __init__(self, model):
            self.compiled = autofusion.compile(model, level=level, strict=strict)

        def run(self, inputs, **kwargs):
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if isinstance(inputs, dict):
                outs = self.compiled.run(inputs)
                return [outs[n] for n in self.compiled.output_names]
            out = self.compiled(*inputs)
            return list(out) if isinstance(out, tuple) else [out]

    class Backend(onnx.backend.base.Backend):
        @classmethod
        def prepare(cls, model, device="CPU", **kwargs):
            return Rep(model)

        @classmethod
        def supports_device(cls, device: str) -> bool:
            return device == "CPU"
    return Backend


def first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    # an UnsupportedOpError's first line only counts the nodes: keep the op lines too
    return " ".join(lines[:3])[:300]


class OneCaseRunner(Runner):
    """ONNX's backend test runner for the cases it is given, one at a time (the stock one
    builds every case of every suite first: half a minute per worker)."""

    def __init__(self, backend):   # not super().__init__: it would load every suite
        self.backend, self._parent_module, self._test_kwargs = backend, None, {}
        self._include_patterns, self._exclude_patterns, self._xfail_patterns = set(), set(), set()
        self._test_items = defaultdict(dict)

    def test_function(self, suite: str, case):
        """The runner's own test function of one loader TestCase."""
        category = SUITES[suite]
        self._add_model_test(case, category)
        return self._test_items[category + "Model"].pop(case.name + "_cpu").func


def run_in_runner(runner: OneCaseRunner, suite: str, case) -> tuple[bool, str]:
    """One case through the onnx runner's own test function."""
    import unittest
    test = runner.test_function(suite, case)
    runner._test_items.clear()
    try:
        test(unittest.TestCase())
    except unittest.SkipTest as e:   # ORT: an opset it was not built for
        return False, f"skipped: {e}"[:300]
    except BaseException as e:   # noqa: BLE001 - any failure of a case is its result
        return False, first_line(e)
    return True, ""


def worker(conn, system: str) -> None:
    """Run the cases the parent sends, one at a time, answering (passed, message)."""
    import warnings
    warnings.filterwarnings("ignore")
    runner = OneCaseRunner(backend_for(system))
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(run_in_runner(runner, *job))
        except Exception:   # noqa: BLE001 - an unpicklable answer
            conn.send((False, traceback.format_exc(limit=1).splitlines()[-1][:300]))


class Worker:
    """A worker process for one system, replaced when a case kills it or runs too long."""

    def __init__(self, system: str):
        self.system, self.proc, self.conn = system, None, None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child, self.system), daemon=True)
        self.proc.start()
        child.close()
        try:
            ready = self.conn.poll(600) and self.conn.recv() == "ready"
        except EOFError:
            ready = False
        if not ready:   # autofusion or onnxruntime does not import: no case can run
            self.stop()
            raise RuntimeError(f"the {self.system} worker did not start (its traceback is above)")

    def run(self, case: Case, timeout: float) -> Outcome:
        if self.proc is None or not self.proc.is_alive():
            for attempt in range(3):   # a tree being edited may fail to import for a moment
                try:
                    self.start()
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
                    time.sleep(30)
        self.conn.send((case.suite, case.test))
        try:
            if self.conn.poll(timeout):
                passed, message = self.conn.recv()
                return Outcome(case, self.system, passed, message)
            why = f"timeout: still running after {timeout:g} s"
        except (EOFError, OSError):
            why = "crash"
        self.proc.join(0.5)
        code = self.proc.exitcode
        self.stop()
        if why == "crash" and code is not None:
            why = f"crash: the worker died (exit code {code})"
        return Outcome(case, self.system, False, why)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                try:
                    self.conn.send(None)
                    self.proc.join(2)
                except (OSError, BrokenPipeError):
                    pass
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        self.proc = None


def run_cases(cases: list[Case], systems: list[str], timeout: float = 120.0,
              progress=None) -> list[Outcome]:
    """Every case on every system, each system in its own worker process."""
    outcomes = []
    for system in systems:
        w = Worker(system)
        try:
            for i, case in enumerate(cases):
                outcomes.append(w.run(case, timeout))
                if progress:
                    progress(system, i + 1, len(cases), outcomes[-1])
        finally:
            w.stop()
    return outcomes


# ---- the report -----------------------------------------------------------------------------

def main_op(case: Case) -> str:
    """The op a case is about: the one its name starts with (node cases), else its only op,
    else the model (model suites)."""
    short = case.name[len("test_"):].replace("_", "").lower()
    named = [op for op in case.ops if short.startswith(op.split("::")[-1].lower())]
    if named:
        return max(named, key=len)
    return case.ops[0] if len(case.ops) == 1 else f"({case.suite} model)"


def tally(outcomes: list[Outcome], cases: list[Case], totals: dict[str, int], systems: list[str],
          command: str) -> str:
    passed = defaultdict(int)
    for o in outcomes:
        passed[(o.case.suite, o.system)] += o.passed
    scope = defaultdict(int)
    for c in cases:
        scope[c.suite] += 1
    suites = [s for s in SUITES if s in totals]
    lines = [f"    {command}", "",
             "| suite | cases | in scope | " + " | ".join(systems) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in systems) + " |"]
    for s in suites:
        lines.append(f"| {s} | {totals[s]} | {scope[s]} | " +
                     " | ".join(str(passed[(s, y)]) for y in systems) + " |")
    lines.append(f"| **all** | {sum(totals.values())} | {len(cases)} | " +
                 " | ".join(f"**{sum(passed[(s, y)] for s in suites)}**" for y in systems) + " |")
    for system in systems:
        failed = [o for o in outcomes if o.system == system and not o.passed]
        lines += ["", f"## {system}: {len(failed)} failure(s)", ""]
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in failed:
            groups[main_op(o.case)].append(o)
        for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
            lines.append(f"- **{key}** ({len(groups[key])})")
            for o in groups[key]:
                lines.append(f"  - {o.case.suite}/{o.case.name}: {o.message}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.onnx_suites", description=__doc__.split("\n")[0])
    ap.add_argument("--level", type=int, nargs="+", default=[0], help="autofusion levels (default 0)")
    ap.add_argument("--suite", nargs="+", choices=list(SUITES), default=list(SUITES))
    ap.add_argument("--only", help="a regex the case names must match")
    ap.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    ap.add_argument("--out", help="write the tally as markdown to this file")
    args = ap.parse_args(argv)
    cases, totals = discover(args.suite, args.only)
    systems = ([] if args.no_ort else ["ort"]) + [f"autofusion-L{n}" for n in args.level]
    print(f"{len(cases)} cases in scope of {sum(totals.values())}; systems: {', '.join(systems)}",
          file=sys.stderr)
    start = time.time()

    def progress(system, i, n, o):
        if i % 100 == 0 or i == n:
            print(f"  {system}: {i}/{n} ({time.time() - start:.0f} s)", file=sys.stderr)
    outcomes = run_cases(cases, systems, args.timeout, progress)
    command = "python -m autofusion.benchmarks.onnx_suites " + " ".join(argv if argv is not None else sys.argv[1:])
    text = tally(outcomes, cases, totals, systems, command.strip())
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
