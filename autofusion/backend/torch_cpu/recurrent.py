"""LSTM, GRU and RNN: ONNX's one-layer recurrent ops, every direction and layout.

The input projection X·Wᵀ + biases of all time steps is one matmul per direction; the
recurrence is a loop of one small matmul per step. With sequence_lens, a sequence that ends
before the longest one keeps its state from its last step and its Y rows past the end are 0;
the reverse direction runs each sequence backwards within its own length. Half-precision
inputs compute in float32 and round once at the end.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, kernel

Activation = Callable[[torch.Tensor], torch.Tensor]

# name (lower case) → (fn(x, alpha, beta), default alpha, default beta): the defaults are those
# of the ONNX operators of the same name
_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "relu": (lambda x, a, b: torch.relu(x), None, None),
    "tanh": (lambda x, a, b: torch.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: torch.sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: F.leaky_relu(x, a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: torch.where(x > a, x, 0.0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * torch.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: F.elu(x, a), 1.0, None),
    "softsign": (lambda x, a, b: F.softsign(x), None, None),
    "softplus": (lambda x, a, b: F.softplus(x), None, None),
}

_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def activations(node: Node, dirs: int) -> list[list[Activation]]:
    """The node's activation functions, one list per direction. alpha and beta are consumed in
    order by the functions that take them, as ONNX Runtime does; one not given takes its ONNX
    operator's default (ONNX Runtime takes 0 for Affine, ScaledTanh and ThresholdedRelu)."""
    per_dir = len(_DEFAULT_ACTIVATIONS[node.op_type])
    names = node.attr("activations") or _DEFAULT_ACTIVATIONS[node.op_type] * dirs
    if len(names) != per_dir * dirs:
        raise NotImplementedError(f"{node.op_type} needs {per_dir * dirs} activations, "
                                  f"has {len(names)}")
    alphas, betas = iter(node.attr("activation_alpha") or ()), iter(node.attr("activation_beta") or ())
    fns = []
    for name in names:
        if name.lower() not in _ACTIVATIONS:
            raise NotImplementedError(f"{node.op_type} activation {name!r}")
        fn, alpha, beta = _ACTIVATIONS[name.lower()]
        alpha = next(alphas, alpha) if alpha is not None else None
        beta = next(betas, beta) if beta is not None else None
        fns.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return [fns[d * per_dir:(d + 1) * per_dir] for d in range(dirs)]


# ---- one time step of each cell: (projected input, state...) → new state ---------------------
# xw is X_t·Wᵀ plus every bias that adds outside the recurrence; `clip` bounds each gate's input
# to its activation (the identity without the attribute).

def lstm_step(r, p, acts, clip, input_forget):
    """Gates in ONNX's order i, o, f, c; the peepholes [p_i, p_o, p_f] read the previous cell
    state, the output gate's the new one; input_forget couples f = 1 - i."""
    f, g, h = acts
    p_i, p_o, p_f = p if p is not None else (None, None, None)

    def step(xw, h_prev, c_prev):
        i, o, fg, c = (xw + F.linear(h_prev, r)).chunk(4, -1)
        if p is not None:
            i, fg = i + p_i * c_prev, fg + p_f * c_prev
        i = f(clip(i))
        fg = 1 - i if input_forget else f(clip(fg))
        c = fg * c_prev + i * g(clip(c))
        if p is not None:
            o = o + p_o * c
        return f(clip(o)) * h(c), c
    return step


def gru_step(r, rb_h, acts, clip, linear_before_reset):
    """Gates z, r, h; the candidate multiplies the reset gate into the previous state before its
    recurrence matmul, or into that matmul's result (plus Rbh) with linear_before_reset."""
    f, g = acts
    r_zr, r_h = r[: 2 * r.shape[1]], r[2 * r.shape[1]:]

    def step(xw, h_prev):
        x_z, x_r, x_h = xw.chunk(3, -1)
        h_z, h_r = F.linear(h_prev, r_zr).chunk(2, -1)
        z, reset = f(clip(x_z + h_z)), f(clip(x_r + h_r))
        if linear_before_reset:
            hh = g(clip(x_h + reset * F.linear(h_prev, r_h, rb_h)))
        else:
            hh = g(clip(x_h + F.linear(reset * h_prev, r_h)))
        return ((1 - z) * hh + z * h_prev,)
    return step


def rnn_step(r, acts, clip):
    (f,) = acts
    return lambda xw, h_prev: (f(clip(xw + F.linear(h_prev, r))),)


# ---- the time loop ------------------------------------------------------------------------

def scan(step, xw: torch.Tensor, state: tuple, valid: torch.Tensor | None):
    """Run step over xw [seq, batch, ·] from `state`; valid [seq, batch, 1] (or None: all) says
    which steps a sequence still has. Returns Y [seq, batch, hidden] and the final state."""
    ys = []
    for t in range(xw.shape[0]):
        new = step(xw[t], *state)
        if valid is not None:
            new = tuple(torch.where(valid[t], n, s) for n, s in zip(new, state))
        state = new
        ys.append(new[0])
    y = torch.stack(ys) if ys else xw.new_zeros(0, *state[0].shape)
    return (y if valid is None else torch.where(valid, y, 0.0)), state


def reversed_within(lengths: torch.Tensor, seq: int) -> torch.Tensor:
    """Time indices [seq, batch] that reverse each sequence within its length (and leave the
    steps past it in place): applying them twice is the identity."""
    t = torch.arange(seq).unsqueeze(1)
    n = lengths.to(torch.int64).unsqueeze(0)
    return torch.where(t < n, n - 1 - t, t)


def along_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.gather(0, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def one_direction(step, x, w, bias, initial: tuple, lengths, backward: bool):
    """Y [seq, batch, hidden] and the final state of one direction over x [seq, batch, input]."""
    seq = x.shape[0]
    valid = None if lengths is None else \
        (torch.arange(seq).unsqueeze(1) < lengths.to(torch.int64)).unsqueeze(-1)
    index = reversed_within(lengths, seq) if backward and lengths is not None else None
    turn = (lambda t: t.flip(0)) if index is None else (lambda t: along_time(t, index))
    y, state = scan(step, F.linear(turn(x) if backward else x, w, bias), initial, valid)
    return (turn(y) if backward else y), state


# ---- the kernels ----------------------------------------------------------------------------

def cell(node: Node, acts, clip, r, b, p):
    """One direction's step function, and the bias its input projection adds: Wb + Rb, but for
    GRU's Rbh with linear_before_reset, which adds inside the reset gate's product."""
    op, hidden = node.op_type, r.shape[-1]
    wb, rb = (None, None) if b is None else b.chunk(2)
    if op == "LSTM":
        step = lstm_step(r, None if p is None else p.chunk(3), acts, clip, node.attr("input_forget", 0))
    elif op == "GRU":
        before_reset = node.attr("linear_before_reset", 0)
        step = gru_step(r, None if rb is None else rb[2 * hidden:], acts, clip, before_reset)
        if before_reset and rb is not None:
            rb = torch.cat([rb[: 2 * hidden], rb.new_zeros(hidden)])
    else:
        step = rnn_step(r, acts, clip)
    return step, (None if wb is None else wb + rb)


@kernel("LSTM", "GRU", "RNN")
def _recurrent(node: Node) -> Kernel:
    """LSTM, GRU and RNN: every direction, layout, activation, clip, peephole and sequence_lens."""
    direction = node.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    batch_first, n_out = node.attr("layout", 0) == 1, len(node.outputs)
    n_states = 2 if node.op_type == "LSTM" else 1
    acts = activations(node, dirs)
    threshold = node.attr("clip")
    clip = (lambda x: x) if threshold is None else (lambda x: x.clamp(-threshold, threshold))

    def run(x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
        out_dtype = x.dtype
        dt = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        x, w, r = x.to(dt), w.to(dt), r.to(dt)
        if batch_first:   # [batch, seq, ·] and states [batch, dirs, ·]
            x = x.transpose(0, 1)
            h0, c0 = (None if s is None else s.transpose(0, 1) for s in (h0, c0))
        initial = [x.new_zeros(dirs, x.shape[1], r.shape[-1]) if s is None else s.to(dt)
                   for s in (h0, c0)[:n_states]]
        ys, finals = [], []
        for d in range(dirs):
            step, bias = cell(node, acts[d], clip, r[d], None if b is None else b[d].to(dt),
                              None if p is None else p[d].to(dt))
            backward = direction == "reverse" or d == 1
            y, state = one_direction(step, x, w[d], bias, tuple(s[d] for s in initial), lengths,
                                     backward)
            ys.append(y)
            finals.append(state)
        y = torch.stack(ys, 1)                                       # [seq, dirs, batch, hidden]
        states = [torch.stack([f[k] for f in finals]) for k in range(n_states)]   # [dirs, batch, ·]
        if batch_first:
            y, states = y.permute(2, 0, 1, 3), [s.transpose(0, 1) for s in states]
        results = tuple(t.to(out_dtype) for t in (y, *states))[:n_out]
        return results[0] if n_out == 1 else results
    return run
