"""The fuzz cases of test_fuzz.py: mutations of an ONNX model, and the check one case must pass.

A mutation is (kind, k, i, x): `kind` names what it changes (a graph input's dimension, an
initializer's data type, a node's attribute, ...), `k` picks the place (taken modulo the number
of places), `i` and `x` are the int and float it writes. Hypothesis draws them as plain tuples,
so a failing case shrinks to the smallest list of simplest mutations, and its description
(what `mutate` returns) reads as what was done to the file.

`check(data, path)` is one case: the bytes written to `path`, then `autofusion.load` (of the file
and, where the bytes parse, of the ModelProto), `autofusion.compile`, a run on random inputs and
ONNX Runtime on the same inputs. Its verdict is "ok: ..." or "bug: ...": a bug is an exception that
is not an AutofusionError, an AutofusionError that names no place (file, node, input or output),
or outputs that differ from ONNX Runtime's. Run as a module, this file serves cases to
test_fuzz.py over a pipe, so a native crash or a hang ends the worker process and not the tests.
"""
from __future__ import annotations

import base64
import importlib
import json
import math
import os
import re
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

INTS = [0, 1, 2, 3, 7, -1, -2, 64, 2**31 - 1, 2**31, 2**40, -2**31, 2**62]
FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, 3e38, -1.5, 0.5, 3.0]
ELEM_TYPES = list(range(30))   # every TensorProto code and a few past the last
OPS = ["Relu", "Add", "MatMul", "Conv", "Reshape", "Transpose", "Softmax", "Gather", "Concat",
       "Slice", "Identity", "Split", "TopK", "Cast", "Where", "ReduceSum", "LayerNormalization",
       "If", "Loop", "NoSuchOp"]
DOMAINS = ["", "ai.onnx", "com.microsoft", "ai.onnx.ml", "autofusion", "no.such.domain"]
OPSETS = [0, 1, 5, 7, 9, 11, 13, 17, 18, 21, 22, 23, 24, 30, 1000]
IR_VERSIONS = [0, 1, 3, 4, 7, 8, 9, 10, 11, 12, 99]
ATTR_NAMES = ["axis", "axes", "perm", "to", "keepdims", "group", "pads", "strides",
              "kernel_shape", "mode", "epsilon", "bogus"]
RUN_ELEMENTS = 1 << 18   # inputs larger than this are not made: the case compiles only
COMPARE_ELEMENTS = 1 << 22   # outputs (a Tile by 10^7, say) larger than this are not compared
MEMORY_LIMIT = 6 << 30   # the worker's address space: a huge allocation fails instead of the host


# ---- mutations of the protobuf fields ---------------------------------------------------------

def _tensor_types(m: onnx.ModelProto) -> list:
    g = m.graph
    return [vi.type.tensor_type for vi in [*g.input, *g.output, *g.value_info]
            if vi.type.HasField("tensor_type")]


def _pick(seq, k):
    return seq[k % len(seq)] if len(seq) else None


def _value_names(m: onnx.ModelProto) -> list[str]:
    g = m.graph
    return sorted({vi.name for vi in g.input} | {t.name for t in g.initializer}
                  | {o for n in g.node for o in n.output} | {"ghost", ""})


def mutate_dim(m, k, i, x):
    tt = _pick(_tensor_types(m), k)
    if tt is None or not tt.shape.dim:
        return None
    d = _pick(tt.shape.dim, k // 7)
    if k % 3 == 0:
        d.dim_value = i
        return f"a dimension set to {i}"
    if k % 3 == 1:
        d.dim_param = "Z"
        return "a dimension renamed 'Z'"
    d.Clear()
    return "a dimension cleared"


def mutate_rank(m, k, i, x):
    tt = _pick(_tensor_types(m), k)
    if tt is None:
        return None
    if k % 3 == 0 and tt.shape.dim:
        del tt.shape.dim[-1]
        return "a dimension removed"
    if k % 3 == 1:
        tt.shape.dim.add().dim_value = i
        return f"a dimension {i} appended"
    tt.ClearField("shape")
    return "a shape removed"


def mutate_elem_type(m, k, i, x):
    tt = _pick(_tensor_types(m), k)
    if tt is None:
        return None
    tt.elem_type = _pick(ELEM_TYPES, i + k)
    return f"an edge's elem_type set to {tt.elem_type}"


def mutate_init_dims(m, k, i, x):
    t = _pick(m.graph.initializer, k)
    if t is None:
        return None
    if k % 3 == 0 and t.dims:
        t.dims[(k // 3) % len(t.dims)] = i
        return f"initializer {t.name!r}: a dim set to {i}"
    if k % 3 == 1:
        t.dims.append(abs(i) % 5)
        return f"initializer {t.name!r}: a dim appended"
    del t.dims[:]
    return f"initializer {t.name!r}: dims cleared"


def mutate_init_dtype(m, k, i, x):
    t = _pick(m.graph.initializer, k)
    if t is None:
        return None
    t.data_type = _pick(ELEM_TYPES, i + k)
    return f"initializer {t.name!r}: data_type set to {t.data_type}"


def mutate_init_data(m, k, i, x):
    t = _pick(m.graph.initializer, k)
    if t is None:
        return None
    raw = t.raw_data
    if k % 4 == 0:
        t.raw_data = raw[: (abs(i) % max(len(raw), 1))]
        return f"initializer {t.name!r}: raw_data cut to {len(t.raw_data)} bytes"
    if k % 4 == 1:
        t.raw_data = raw + b"\x01" * (1 + abs(i) % 9)
        return f"initializer {t.name!r}: raw_data lengthened"
    if k % 4 == 2:
        t.float_data.extend([x, x])
        return f"initializer {t.name!r}: float_data added besides raw_data"
    t.ClearField("raw_data")
    return f"initializer {t.name!r}: raw_data removed"


def _attribute(m, k):
    attrs = [(n, a) for n in m.graph.node for a in n.attribute]
    return _pick(attrs, k)


def mutate_attr_value(m, k, i, x):
    picked = _attribute(m, k)
    if picked is None:
        return None
    n, a = picked
    A = AttributeProto
    if a.type == A.INT:
        a.i = i
    elif a.type == A.FLOAT:
        a.f = x
    elif a.type == A.INTS:
        if a.ints and k % 3:
            a.ints[(k // 3) % len(a.ints)] = i
        elif k % 2:
            a.ints.append(i)
        else:
            del a.ints[:]
    elif a.type == A.FLOATS:
        a.floats.append(x)
    elif a.type == A.STRING:
        a.s = [b"", b"bogus", b"\xff\xfe", b"linear"][k % 4]
    elif a.type == A.TENSOR:
        a.t.CopyFrom(helper.make_tensor("t", _pick([1, 7, 9, 11], k), [abs(i) % 3], [1] * (abs(i) % 3)))
    return f"node {n.name!r}: attribute {a.name!r} changed"


def mutate_attr_type(m, k, i, x):
    picked = _attribute(m, k)
    if picked is None:
        return None
    n, a = picked
    a.type = _pick(list(AttributeProto.AttributeType.values()), i + k)
    return f"node {n.name!r}: attribute {a.name!r} given type {a.type}"


def mutate_attr_drop(m, k, i, x):
    picked = _attribute(m, k)
    if picked is None:
        return None
    n, a = picked
    n.attribute.remove(a)
    return f"node {n.name!r}: attribute {a.name!r} removed"


def mutate_attr_add(m, k, i, x):
    n = _pick(m.graph.node, k)
    if n is None:
        return None
    name = _pick(ATTR_NAMES, k // 5 + i)
    value = [i, i][: 1 + k % 2] if k % 3 == 0 else (x if k % 3 == 1 else i)
    del_same = [a for a in n.attribute if a.name == name]
    for a in del_same:
        n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(name, value))
    return f"node {n.name!r}: attribute {name!r} set to {value}"


def mutate_node_input(m, k, i, x):
    n = _pick(m.graph.node, k)
    if n is None:
        return None
    names = _value_names(m)
    if k % 4 == 0 or not n.input:
        n.input.append(_pick(names, i))
        return f"node {n.name!r}: an input added"
    slot = (k // 4) % len(n.input)
    if k % 4 == 1:
        del n.input[slot]
        return f"node {n.name!r}: input {slot} removed"
    n.input[slot] = _pick(names, i + k)
    return f"node {n.name!r}: input {slot} set to {n.input[slot]!r}"


def mutate_node_output(m, k, i, x):
    n = _pick(m.graph.node, k)
    if n is None:
        return None
    names = _value_names(m)
    if k % 4 == 0:
        n.output.append(f"extra{i}")
        return f"node {n.name!r}: an output added"
    if k % 4 == 1 and n.output:
        del n.output[-1]
        return f"node {n.name!r}: its last output removed"
    if not n.output:
        return None
    slot = (k // 4) % len(n.output)
    n.output[slot] = _pick(names, i + k)
    return f"node {n.name!r}: output {slot} set to {n.output[slot]!r}"


def mutate_op_type(m, k, i, x):
    n = _pick(m.graph.node, k)
    if n is None:
        return None
    old, n.op_type = n.op_type, _pick(OPS, i + k)
    return f"node {n.name!r}: {old} became {n.op_type}"


def mutate_domain(m, k, i, x):
    n = _pick(m.graph.node, k)
    if n is None:
        return None
    n.domain = _pick(DOMAINS, i + k)
    return f"node {n.name!r}: domain set to {n.domain!r}"


def mutate_opset(m, k, i, x):
    if k % 4 == 0:
        del m.opset_import[:]
        return "opset imports removed"
    if k % 4 == 1:
        m.ir_version = _pick(IR_VERSIONS, i + k)
        return f"ir_version set to {m.ir_version}"
    if k % 4 == 2:
        m.opset_import.append(helper.make_opsetid("", _pick(OPSETS, i)))
        return "a second default-domain opset import added"
    if not m.opset_import:
        return None
    m.opset_import[0].version = _pick(OPSETS, i + k)
    return f"opset set to {m.opset_import[0].version}"


def mutate_graph_io(m, k, i, x):
    g = m.graph
    io = g.input if k % 2 == 0 else g.output
    which = "input" if k % 2 == 0 else "output"
    vi = _pick(io, k // 2)
    if vi is None:
        return None
    if k % 3 == 0:
        io.append(vi)
        return f"graph {which} {vi.name!r} listed twice"
    name = vi.name
    io.remove(vi)
    return f"graph {which} {name!r} removed"


def mutate_nodes(m, k, i, x):
    g = m.graph
    n = _pick(g.node, k)
    if n is None:
        return None
    if k % 2 == 0:
        g.node.remove(n)
        return f"node {n.name!r} removed"
    nodes = list(g.node)
    nodes.remove(n)
    nodes.insert(abs(i) % (len(nodes) + 1), n)
    del g.node[:]
    g.node.extend(nodes)
    return f"node {n.name!r} moved"


def mutate_value_info(m, k, i, x):
    g = m.graph
    outs = [o for n in g.node for o in n.output if o]
    name = _pick(outs, k)
    if name is None:
        return None
    shape = None if k % 3 == 0 else [abs(i) % 5] * (1 + k % 4)
    g.value_info.append(helper.make_tensor_value_info(name, _pick([1, 7, 9, 10, 11], i + k), shape))
    return f"value_info of {name!r} declared {shape}"


FIELD_MUTATIONS = {
    "dim": mutate_dim, "rank": mutate_rank, "elem_type": mutate_elem_type,
    "init_dims": mutate_init_dims, "init_dtype": mutate_init_dtype, "init_data": mutate_init_data,
    "attr_value": mutate_attr_value, "attr_type": mutate_attr_type, "attr_drop": mutate_attr_drop,
    "attr_add": mutate_attr_add, "node_input": mutate_node_input, "node_output": mutate_node_output,
    "op_type": mutate_op_type, "domain": mutate_domain, "opset": mutate_opset,
    "graph_io": mutate_graph_io, "nodes": mutate_nodes, "value_info": mutate_value_info,
}


def mutate(model: onnx.ModelProto, mutations) -> list[str]:
    """Apply (kind, k, i, x) mutations in order; what each did (None: found nothing to change)."""
    return [FIELD_MUTATIONS[kind](model, k, i, x) for kind, k, i, x in mutations]


# ---- mutations of the bytes -------------------------------------------------------------------

def mutate_bytes(data: bytes, edits) -> tuple[bytes, list[str]]:
    """Apply (kind, position, value) byte edits: truncate, flip a bit, overwrite, insert, delete."""
    b = bytearray(data)
    done = []
    for kind, pos, value in edits:
        if not b:
            break
        p = pos % len(b)
        if kind == "truncate":
            del b[p:]
        elif kind == "flip":
            b[p] ^= 1 << (value % 8)
        elif kind == "overwrite":
            b[p] = value % 256
        elif kind == "insert":
            b[p:p] = bytes([value % 256])
        else:
            del b[p]
        done.append(f"{kind} at {p}")
    return bytes(b), done


# ---- one case -----------------------------------------------------------------------------

def _place_names(path: Path, model: onnx.ModelProto | None) -> set[str]:
    """Names an error may give as its place: the file, the nodes, the values, the ops."""
    names = {path.name}
    if model is not None:
        g = model.graph
        names |= {n.name for n in g.node} | {n.op_type for n in g.node}
        names |= {v.name for v in [*g.input, *g.output, *g.initializer, *g.value_info]}
        names |= {o for n in g.node for o in [*n.input, *n.output]}
        names |= {i.domain for i in model.opset_import}
    return {n if isinstance(n, str) else repr(n) for n in names if n}   # bytes: not UTF-8


def _feeds(graph, rng) -> dict | None:
    """Random inputs for the compiled graph (symbolic sizes 2), or None where one cannot be made."""
    from autofusion.ir import DType
    feeds = {}
    for v in graph.inputs:
        if v.shape is None or v.dtype is None:
            return None
        shape = [d if isinstance(d, int) else 2 for d in v.shape]
        if any(d < 0 for d in shape) or math.prod(shape) > RUN_ELEMENTS:
            return None
        try:
            dtype = v.dtype.numpy
        except TypeError:
            return None
        if v.dtype == DType.BOOL:
            feeds[v.name] = rng.integers(0, 2, shape).astype(bool)
        elif v.dtype.is_integer:
            feeds[v.name] = rng.integers(0, 4, shape).astype(dtype)
        elif v.dtype.is_float:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        else:
            return None
    return feeds


def differs(got, want) -> str | None:
    """How an output differs from ONNX Runtime's: shape, dtype, NaN or infinity positions, or a
    max error over 1e-4 of its largest finite magnitude; None where it does not."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} where ONNX Runtime gives {want.dtype}{list(want.shape)}"
    if want.dtype.kind != "f":
        return None if np.array_equal(got, want) else "values differ"
    got, want = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return "NaN in different places"
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
        return "infinities differ"
    scale = max(np.abs(want[finite]).max(initial=0.0), 1e-30)
    err = np.abs(got[finite] - want[finite]).max(initial=0.0) / scale
    return None if err <= 1e-4 else f"relative error {err:.3g} > 1e-4"


def _named(e: BaseException, places: set[str]) -> bool:
    """Whether the error names a place: one of `places` as messages quote them ('x', (Relu),
    ONNX's "node name: add"), or a field of the file by its path (graph.node[3].input[0])."""
    msg = str(e)
    quoted = (f"{q[0]}{p}{q[1]}" for p in places for q in ("''", '""', "()", ("name: ", ""),
                                                             ("node name ", ""), ("op_type:", ""),
                                                             ("optype ", "")))
    return any(q in msg for q in quoted) or any(repr(p) in msg for p in places) or \
        re.search(r"\b(graph|functions)[.\[]|\.onnx\b|node '#\d+'", msg) is not None


def check(data: bytes, path: Path, report=lambda stage: None) -> str:
    """One case; its verdict, "ok: ..." or "bug: ...". `report` hears each stage as it starts,
    so a crash can be put down to the stage it happened in."""
    import onnxruntime as ort

    import autofusion
    from autofusion import AutofusionError

    path.write_bytes(data)
    try:
        proto = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - unparseable bytes: only the file path is tried
        proto = None
    places = _place_names(path, proto)

    def attempt(stage, fn):
        report(stage)
        try:
            return fn(), None
        except AutofusionError as e:
            if not _named(e, places):
                return None, f"bug: {stage}: {type(e).__name__} names no file, node, input or output: {e}"
            return None, f"ok: {stage} refused: {type(e).__name__}: {str(e)[:300]}"
        except Exception:  # noqa: BLE001 - the point: anything else is a bug
            return None, f"bug: {stage} raised\n{traceback.format_exc()}"

    if proto is not None:
        _, verdict = attempt("autofusion.load(ModelProto)", lambda: autofusion.load(proto))
        if verdict and verdict.startswith("bug"):
            return verdict
    _, verdict = attempt("autofusion.load(path)", lambda: autofusion.load(path))
    if verdict:
        return verdict
    model, verdict = attempt("autofusion.compile", lambda: autofusion.compile(path))
    if verdict:
        return verdict
    feeds = _feeds(model.graph, np.random.default_rng(0))
    if feeds is None:
        return "ok: compiled (inputs not made: unknown or large shapes)"
    got, verdict = attempt("running the compiled model", lambda: model.run(feeds))
    if verdict:
        return verdict
    report("ONNX Runtime")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    except Exception as e:  # noqa: BLE001 - ORT refusing is an answer too
        return f"ok: ran; ONNX Runtime refused it: {type(e).__name__}: {str(e)[:300]}"
    if _extreme_values(proto):
        return ("ok: ran, as ONNX Runtime did (weights beyond 1e6 or not finite, or a batch norm's "
                "var + epsilon not positive: not compared)")
    if sum(np.size(v) for v in got.values()) > COMPARE_ELEMENTS:
        return "ok: ran, as ONNX Runtime did (outputs too large to compare here)"
    for name, value in got.items():
        if name in want:
            diff = differs(value, want[name])
            if diff:
                return f"bug: output {name!r}: {diff}"
    return "ok: same as ONNX Runtime"


def _extreme_values(model: onnx.ModelProto) -> bool:
    """Whether a float weight or attribute is NaN, infinite or beyond 1e6 (a damaged byte of
    one, say): then where the outputs' NaNs fall (a max over a window with a NaN, a relu of
    one) and how an overflow shows (a LayerNorm over 1e29) differ between runtimes, ONNX
    Runtime and PyTorch among them; or a batch norm makes NaN itself (_negative_variance)."""
    if _negative_variance(model):
        return True
    attrs = [a for n in model.graph.node for a in n.attribute]
    values = [np.array([a.f, *a.floats], np.float64) for a in attrs]
    for t in [*model.graph.initializer, *(a.t for a in attrs if a.type == AttributeProto.TENSOR)]:
        if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
            if math.prod(t.dims) > COMPARE_ELEMENTS:
                return True
            values.append(onnx.numpy_helper.to_array(t).astype(np.float64))
    return any(not np.isfinite(v).all() or np.abs(v).max(initial=0) > 1e6 for v in values)


def _negative_variance(model: onnx.ModelProto) -> bool:
    """Whether a BatchNormalization's var + epsilon is not positive for some channel (a mutated
    epsilon, say): its square root is NaN from the start, and where a ReLU or a pool after it
    keeps or drops that NaN differs between runtimes (oneDNN's ReLU gives 0, ONNX Runtime's NaN),
    as with a NaN weight. Known, not compared."""
    consts = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type != "BatchNormalization" or len(n.input) < 5 or n.input[4] not in consts:
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        var = onnx.numpy_helper.to_array(consts[n.input[4]]).astype(np.float64)
        if var.size and not (var + eps > 0).all():
            return True
    return False


# ---- the worker ---------------------------------------------------------------------------

def serve() -> None:
    """Read cases (JSON lines: base64 bytes and a file name) from stdin; write each stage and the
    verdict as JSON lines on the original stdout (anything libraries print goes to stderr)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(**msg):
        out.write(json.dumps(msg) + "\n")

    def stage(case: dict, name: str) -> None:
        send(stage=name)
        if case.get("abort_in") == name:   # test_fuzz checks a crash is caught with these two
            os.abort()
        if case.get("sleep_in") == name:
            time.sleep(3600)

    importlib.import_module("autofusion")   # the slow imports once, before the first case
    send(ready=True)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            verdict = check(base64.b64decode(case["data"]), Path(case["path"]),
                            report=lambda name, case=case: stage(case, name))
        except Exception:  # noqa: BLE001 - the harness's own failure, told as one
            verdict = f"bug: the fuzz harness failed\n{traceback.format_exc()}"
        send(verdict=verdict)


if __name__ == "__main__":
    serve()
