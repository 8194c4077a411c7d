"""Views in the native runtime: a Transpose, a block (Gather by one index, Slice, Split) and a
Reshape are the same bytes seen through other strides, copied only by a reader that needs them
dense. Chains of views, random and the attention head split of a ViT, end in each kind of reader
and equal the torch backend; the plan never writes over bytes a view still shows.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autofusion
from autofusion.backend.native import unavailable
from autofusion.backend.precision import cpu_flags, has_bf16
from autofusion.ir import DType

from .test_impls import check_native, const, graph
from .test_step_kernels import own_loops
from .cpu import avx512

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"native backend: {unavailable()}")

ints = lambda *v: np.array(v, np.int64)   # noqa: E731


def shaped(v, shape):
    v.shape, v.dtype = tuple(shape), DType.FLOAT
    return v


def apply_view(op, v, draw):
    """One random view of v (its shape known), its output shaped."""
    shape = list(v.shape)
    rank = len(shape)
    kind = draw(st.sampled_from(["transpose", "slice", "gather", "reshape", "unsqueeze", "squeeze"]))
    if kind == "transpose":
        perm = draw(st.permutations(range(rank)))
        return shaped(op.Transpose(v, perm=list(perm)), [shape[p] for p in perm])
    if kind == "slice":
        axis = draw(st.integers(0, rank - 1))
        lo = draw(st.integers(0, shape[axis] - 1))
        hi = draw(st.integers(lo + 1, shape[axis]))
        out = list(shape)
        out[axis] = hi - lo
        return shaped(op.Slice(v, op.constant(ints(lo), "s"), op.constant(ints(hi), "e"),
                               op.constant(ints(axis), "a")), out)
    if kind == "gather" and rank > 1:
        axis = draw(st.integers(0, rank - 1))
        i = draw(st.integers(0, shape[axis] - 1))
        index = op.graph.add_constant(op.graph.fresh_name("i"), np.array(i, np.int64))
        return shaped(op.Gather(v, index, axis=axis), shape[:axis] + shape[axis + 1:])
    if kind == "squeeze" and 1 in shape and rank > 1:
        axis = shape.index(1)
        return shaped(op.Squeeze(v, op.constant(ints(axis), "a")), shape[:axis] + shape[axis + 1:])
    if kind == "reshape" and rank > 1:
        # merge two neighbouring axes, or split one: a view only where strides allow it
        axis = draw(st.integers(0, rank - 2))
        if draw(st.booleans()):
            out = shape[:axis] + [shape[axis] * shape[axis + 1]] + shape[axis + 2:]
        else:
            d = shape[axis]
            f = draw(st.sampled_from([k for k in range(1, d + 1) if d % k == 0]))
            out = shape[:axis] + [f, d // f] + shape[axis + 1:]
        return shaped(op.Reshape(v, op.constant(np.array(out, np.int64), "s")), out)
    axis = draw(st.integers(0, rank))   # unsqueeze
    return shaped(op.Unsqueeze(v, op.constant(ints(axis), "a")), shape[:axis] + [1] + shape[axis:])


READERS = ["output", "relu", "add", "matmul", "softmax", "concat", "transpose_out", "two_readers"]


@st.composite
def view_chains(draw):
    """(input shape, build): a root (the input, or a value a step computes), 1-5 random views of
    it, and a reader of the last one."""
    shape = draw(st.lists(st.integers(1, 5), min_size=2, max_size=4))
    computed = draw(st.booleans())
    steps = draw(st.integers(1, 5))
    reader = draw(st.sampled_from(READERS))

    def build(op, x):
        v = shaped(op.Mul(x, op.constant(np.array(2.0, np.float32), "two")), shape) if computed else x
        for _ in range(steps):
            v = apply_view(op, v, draw)
        out = list(v.shape)
        if reader == "output":
            return [(v, out)]
        if reader == "relu":
            return [(op.Relu(v), out)]
        if reader == "add":
            return [(op.Add(v, const(op, *out[-1:])), out)]
        if reader == "matmul" and len(out) > 1:
            return [(op.MatMul(v, const(op, out[-1], 3)), out[:-1] + [3])]
        if reader == "softmax":
            return [(op.Softmax(v, axis=-1), out)]
        if reader == "concat":
            return [(op.Concat(v, v, axis=0), [2 * out[0]] + out[1:])]
        if reader == "transpose_out":
            return [(op.Transpose(v, perm=list(range(len(out)))[::-1]), out[::-1])]
        return [(op.Relu(v), out), (op.Sigmoid(v), out), (v, out)]   # two readers, and the view out

    return shape, build


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view_chains())
def test_random_chains_of_views_read_by_every_kind_of_step(case):
    shape, build = case
    check_native(graph({"x": tuple(shape)}, build), bound=1e-5)


def vit_head_split(op, x, qkv_weight):
    """torchvision's multi-head attention in front of its product: the QKV projection's output
    unflattened, transposed, squeezed, split into q, k and v by Gather and each split into heads."""
    seq, heads, width = 7, 2, 8
    qkv = shaped(op.MatMul(x, qkv_weight), (seq, 1, 3 * width))
    r = shaped(op.Reshape(qkv, op.constant(ints(seq, 1, 3, width), "s")), (seq, 1, 3, width))
    u = shaped(op.Unsqueeze(r, op.constant(ints(0), "a")), (1, seq, 1, 3, width))
    t = shaped(op.Transpose(u, perm=[3, 1, 2, 0, 4]), (3, seq, 1, 1, width))
    s = shaped(op.Squeeze(t, op.constant(ints(-2), "a")), (3, seq, 1, width))
    parts = []
    for i in range(3):
        index = op.graph.add_constant(op.graph.fresh_name("i"), np.array(i, np.int64))
        g = shaped(op.Gather(s, index, axis=0), (seq, 1, width))
        h = shaped(op.Reshape(g, op.constant(ints(seq, heads, width // heads), "s")), (seq, heads, width // heads))
        parts.append(shaped(op.Transpose(h, perm=[1, 0, 2]), (heads, seq, width // heads)))
    q, k, v = parts
    kt = shaped(op.Transpose(k, perm=[0, 2, 1]), (heads, width // heads, seq))
    scores = shaped(op.MatMul(q, kt), (heads, seq, seq))
    weights = shaped(op.Softmax(scores, axis=-1), (heads, seq, seq))
    out = shaped(op.MatMul(weights, v), (heads, seq, width // heads))
    back = shaped(op.Transpose(out, perm=[1, 0, 2]), (seq, heads, width // heads))
    return shaped(op.Reshape(back, op.constant(ints(seq, width), "s")), (seq, width))


def test_the_attention_head_split_of_a_vit_reads_the_projection_through_views():
    check_native(graph({"x": (7, 1, 8)}, lambda op, x: [
        (vit_head_split(op, x, const(op, 8, 24)), (7, 8))]))


def test_the_head_split_in_bf16_is_within_bf16_rounding():
    # fixed data: bf16's 8-bit significands put this case at 2.1e-2 of the output's largest
    # value (the same with views or copies); other weights reach 6e-2 through cancellation
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 24)).astype(np.float32)
    g = graph({"x": (7, 1, 8)}, lambda op, x: [(vit_head_split(op, x, op.constant(weight, "w")), (7, 8))])
    feeds = {"x": rng.standard_normal((7, 1, 8)).astype(np.float32)}
    got = autofusion.compile(g, level=2, backend="native", precision="bf16").run(feeds)
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)
    (name,) = want
    assert np.abs(got[name] - want[name]).max() <= 4e-2 * np.abs(want[name]).max()


def test_a_step_never_writes_over_bytes_a_later_view_shows():
    # relu(x·2) may run in place over x·2 only if nothing reads those bytes later; here a
    # transpose of them (a view, not a copy) is read after the relu
    def build(op, x):
        y = shaped(op.Mul(x, op.constant(np.array(2.0, np.float32), "two")), (3, 4))
        t = shaped(op.Transpose(y, perm=[1, 0]), (4, 3))
        r = shaped(op.Relu(y), (3, 4))
        return [(op.Add(op.Transpose(r, perm=[1, 0]), t), (4, 3))]
    g = graph({"x": (3, 4)}, build)
    model = check_native(g)
    part = model.plan.partitions[0]
    relu = next(n for n in part.nodes if n.op_type == "Relu")
    assert part.values[relu.outputs[0]].in_place_of is None


RNG_VIEWS = np.random.default_rng(7)


def check_native_level2(g):
    """The graph at level 2 runs fully native and equals the torch backend at level 0."""
    model = autofusion.compile(g, level=2, backend="native")
    assert all(d.impl.target == "native" for d in model.plan.decisions.values())
    feeds = {v.name: RNG_VIEWS.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    got, want = model.run(feeds), autofusion.compile(g, level=0, backend="torch").run(feeds)
    for name in want:
        assert np.abs(got[name] - want[name]).max() <= 1e-5 * max(1.0, np.abs(want[name]).max())
    return model


def heads_attention(op, q, k, v, weight, heads_read_twice=False, seq_first=False):
    """softmax(q·kᵀ/√d)·v over [1,H,S,D] heads, merged back to [1,S,H·D] by Transpose and
    Reshape and projected, as BERT and GPT-2 export it, or to [S,1,H·D] (`seq_first`, as
    torchvision's ViT does); `heads_read_twice`: the attention's output is also a graph output."""
    _, h, s, d = q.shape
    kt = shaped(op.Transpose(k, perm=[0, 1, 3, 2]), (1, h, d, s))
    scores = shaped(op.Div(op.MatMul(q, kt), op.constant(np.array(d ** 0.5, np.float32), "sqrt_d")),
                    (1, h, s, s))
    out = shaped(op.MatMul(shaped(op.Softmax(scores, axis=-1), (1, h, s, s)), v), (1, h, s, d))
    perm, rows = ([2, 0, 1, 3], (s, 1)) if seq_first else ([0, 2, 1, 3], (1, s))
    back = shaped(op.Transpose(out, perm=perm), [(1, h, s, d)[p] for p in perm])
    merged = shaped(op.Reshape(back, op.constant(ints(*rows, h * d), "s")), (*rows, h * d))
    outs = [(op.MatMul(merged, weight), (*rows, weight.shape[1]))]
    return outs + [(out, (1, h, s, d))] if heads_read_twice else outs


def attention_case(heads_read_twice=False, seq_first=False, shape=(1, 3, 10, 8)):
    return graph({"q": shape, "k": shape, "v": shape}, lambda op, q, k, v: heads_attention(
        op, q, k, v, const(op, shape[1] * shape[3], 5), heads_read_twice, seq_first))


def attention_and_reshape(model):
    (part,) = model.plan.partitions
    (attention,) = [n for n in part.nodes if n.op_type == "Attention"]
    (reshape,) = [n for n in part.nodes if n.op_type == "Reshape"]
    return part, attention, reshape


@avx512
@pytest.mark.parametrize("seq_first", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_attention_writes_its_heads_merged_back_and_the_reshape_after_is_a_view(precision, seq_first):
    # [1,S,H,D] or, seq_first, [S,1,H,D]: the unit axis anywhere, p·v still oneDNN's brgemm (a
    # shape of its own: oneDNN's primitive cache could hand back a kernel made for an earlier one)
    g = attention_case(seq_first=seq_first, shape=(1, 4, 9, 16) if seq_first else (1, 3, 10, 8))
    model = autofusion.compile(g, level=2, backend="native", precision=precision)
    part, attention, reshape = attention_and_reshape(model)
    order = (2, 0, 1, 3) if seq_first else (0, 2, 1, 3)
    assert part.values[attention.outputs[0]].order == order
    assert f"order {','.join(map(str, order))}" in str(model.plan)
    assert model.plan.kernels[reshape] == ""            # a view: nothing runs
    assert model.plan.kernels[attention].rsplit(" + ", 1)[-1].startswith("brg")   # p·v
    feeds = {v.name: RNG_VIEWS.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    got = model.run(feeds)
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)
    (name,) = want
    bound = 1e-5 if precision == "fp32" else 2e-2   # bf16: p·v's operands rounded to 8 bits
    assert np.abs(got[name] - want[name]).max() <= bound * np.abs(want[name]).max()


@avx512
def test_the_heads_of_a_vit_are_merged_back_as_the_product_writes_them():
    # three axes ([H,S,D] stored [S,H,D]): still oneDNN's brgemm for p·v
    model = check_native_level2(graph({"x": (7, 1, 8)}, lambda op, x: [
        (vit_head_split(op, x, const(op, 8, 24)), (7, 8))]))
    (attention,) = [n for n in model.plan.partitions[0].nodes if n.op_type == "Attention"]
    assert model.plan.partitions[0].values[attention.outputs[0]].order == (1, 0, 2)
    assert model.plan.kernels[attention].rsplit(" + ", 1)[-1].startswith("brg")


def test_an_attention_read_by_more_than_the_transpose_keeps_its_axes_in_order():
    g = attention_case(heads_read_twice=True)
    model = autofusion.compile(g, level=2, backend="native")
    part, attention, reshape = attention_and_reshape(model)
    assert attention.outputs[0] not in part.values or part.values[attention.outputs[0]].order is None
    assert "reorder" in model.plan.kernels[reshape]     # the transposed heads copied dense
    feeds = {v.name: RNG_VIEWS.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    got, want = model.run(feeds), autofusion.compile(g, level=0, backend="torch").run(feeds)
    for name in want:
        assert np.abs(got[name] - want[name]).max() <= 1e-5 * max(1.0, np.abs(want[name]).max())


def split_heads_attention(op, x, masked, mask=None):
    """GPT-2's attention over one projection [1,S,3·H·D]: q, k and v sliced out of it and split
    into heads (views no brgemm reads, so they are copied dense), with or without a causal mask
    (or the `mask` given). H = 2, D = 32: 128-byte rows in fp32, whole rows the runtime copies
    itself."""
    _, seq, width = x.shape
    heads, d = 2, width // 6
    parts = []
    for i in range(3):
        s = shaped(op.Slice(x, op.constant(ints(i * heads * d), "s"), op.constant(ints((i + 1) * heads * d), "e"),
                            op.constant(ints(2), "a")), (1, seq, heads * d))
        r = shaped(op.Reshape(s, op.constant(ints(1, seq, heads, d), "r")), (1, seq, heads, d))
        parts.append(shaped(op.Transpose(r, perm=[0, 2, 1, 3]), (1, heads, seq, d)))
    if masked:
        mask = np.triu(np.full((seq, seq), -1e30, np.float32), 1) if mask is None else mask
        mask = op.constant(mask, "mask")
    return [(op.Attention(*parts, mask, scale=d ** -0.5), (1, heads, seq, d))]


@own_loops
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not has_bf16(), reason="no bf16 dot products on this CPU"))])
def test_copied_heads_store_their_keys_padded_on_amx(precision, masked):
    # 37 keys stored as 64 where the products run on AMX (its tails run at half speed or less):
    # k's and v's padding zeroed, the softmax leaving it out and writing it 0; a mask is the
    # softmax's to add. AVX-512's fp32 products take the 37 as they are.
    g = graph({"x": (1, 37, 192)}, lambda op, x: split_heads_attention(op, x, masked))
    model = autofusion.compile(g, level=0, backend="native", precision=precision)
    (kernels,) = [k for n, k in model.plan.kernels.items() if n.op_type == "Attention"]
    on_amx = 2 if precision == "bf16" and "amx_bf16" in cpu_flags() else 0   # both products
    assert kernels.count("avx512_core_amx") == on_amx, kernels
    # in bf16 the copies round the fp32 input, oneDNN's reorders
    copies = "runtime row copy" if precision == "fp32" else "reorder"
    assert kernels.count(copies) == 3 and kernels.count("runtime zero padding") == on_amx, kernels
    assert "binary" not in kernels and kernels.count("brg") == 2, kernels
    feeds = {"x": RNG_VIEWS.standard_normal((1, 37, 192)).astype(np.float32)}
    got = model.run(feeds)
    want = autofusion.compile(g, level=0, backend="torch").run(feeds)
    (name,) = want
    bound = 1e-5 if precision == "fp32" else 2e-2
    assert np.abs(got[name] - want[name]).max() <= bound * np.abs(want[name]).max()


@own_loops
def test_keys_a_multiple_of_32_are_not_padded():
    g = graph({"x": (1, 32, 192)}, lambda op, x: split_heads_attention(op, x, masked=True))
    (kernels,) = [k for n, k in check_native(g).plan.kernels.items() if n.op_type == "Attention"]
    assert "padding" not in kernels and "runtime softmax" in kernels, kernels


@own_loops
def test_a_mask_broadcast_along_the_keys_is_added_by_the_product():
    # a mask of one value per query ([S,1]) is not one row per row of scores: the softmax's loop
    # does not take it, q·kᵀ adds it (a post-op or a binary step), and the keys are not padded
    bias = RNG_VIEWS.standard_normal((37, 1)).astype(np.float32)
    g = graph({"x": (1, 37, 192)}, lambda op, x: split_heads_attention(op, x, True, bias))
    (kernels,) = [k for n, k in check_native(g).plan.kernels.items() if n.op_type == "Attention"]
    assert "padding" not in kernels and "runtime softmax" in kernels, kernels


@own_loops
@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 37), (1, 1, 37, 37), (2, 1, 37, 37), (2, 3, 37, 37)])
@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not has_bf16(), reason="no bf16 dot products on this CPU"))])
def test_a_mask_broadcast_over_batch_or_heads_is_added_by_the_softmax_row_by_row(precision, mask_shape):
    # batch 2, 3 heads: each row of scores reads its own mask row, the broadcast axes at stride 0
    # (in bf16 on AMX the heads are copied and the keys padded to 64)
    shape = (2, 37, 3, 32)

    def attention(op, q, k, v, mask):
        heads = [shaped(op.Transpose(t, perm=[0, 2, 1, 3]), (2, 3, 37, 32)) for t in (q, k, v)]
        return [(op.Attention(*heads, mask, scale=32 ** -0.5), (2, 3, 37, 32))]

    g = graph({"q": shape, "k": shape, "v": shape, "mask": mask_shape}, attention)
    model = autofusion.compile(g, level=0, backend="native", precision=precision)
    (kernels,) = [k for n, k in model.plan.kernels.items() if n.op_type == "Attention"]
    assert "runtime softmax" in kernels and "binary" not in kernels, kernels
    feeds = {n: RNG_VIEWS.standard_normal(shape).astype(np.float32) for n in "qkv"}
    feeds["mask"] = np.where(RNG_VIEWS.random(mask_shape) < 0.3, -1e4, 0).astype(np.float32)
    got, want = model.run(feeds), autofusion.compile(g, level=0, backend="torch").run(feeds)
    (name,) = want
    bound = 1e-5 if precision == "fp32" else 2e-2
    assert np.abs(got[name] - want[name]).max() <= bound * np.abs(want[name]).max()
