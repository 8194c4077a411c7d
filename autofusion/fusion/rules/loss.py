"""Losses: log-softmax followed by the negative log-likelihood is one cross-entropy.

NegativeLogLikelihoodLoss(LogSoftmax(x, axis=1), target) is SoftmaxCrossEntropyLoss(x, target)
with the same weight, reduction and ignore_index, one torch cross_entropy call. Log(Softmax(x))
is matched too; there the fused op is the more accurate (log_softmax does not underflow to -inf
where softmax rounds to 0). NLL of a plain Softmax is not a cross-entropy and is left alone.
"""
from __future__ import annotations

from ..pattern import attr_value
from ..rule import Rule, describe


def log_softmax_nll(op, x, target, weight=None):
    return op.NegativeLogLikelihoodLoss(op.LogSoftmax(x, _name="softmax"), target, weight, _name="nll")


def log_of_softmax_nll(op, x, target, weight=None):
    log_prob = op.Log(op.Softmax(x, _name="softmax"))
    return op.NegativeLogLikelihoodLoss(log_prob, target, weight, _name="nll")


def softmax_cross_entropy_check(m):
    softmax, x = m.node("softmax"), m.x
    if x.rank is None:
        return f"{describe(softmax)}: the rank of {x.name!r} is unknown"
    axis = attr_value(softmax, "axis") % x.rank
    if axis != 1:
        return f"{describe(softmax)}: axis={axis}, the loss's class axis is 1"
    if softmax.graph.opset.get("", 21) < 13 and x.rank != 2:   # then it flattens from `axis` on
        return f"{describe(softmax)}: before opset 13 it normalizes over all axes from 1 on"
    return None


def softmax_cross_entropy_replace(op, m):
    nll = m.node("nll")
    return op.SoftmaxCrossEntropyLoss(m.x, m.target, m.weight, ignore_index=nll.attr("ignore_index"),
                                      reduction=attr_value(nll, "reduction"))


RULES = [
    Rule("SoftmaxCrossEntropyFusionOp", 1,
         "LogSoftmax (or Log∘Softmax) + NegativeLogLikelihoodLoss → one SoftmaxCrossEntropyLoss",
         [log_softmax_nll, log_of_softmax_nll], softmax_cross_entropy_replace,
         softmax_cross_entropy_check),
]
