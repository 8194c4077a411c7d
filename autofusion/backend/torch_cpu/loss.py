"""Loss kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on torch's nll_loss.

ONNX and torch agree on the meaning: the class axis is 1, `weight` scales each class, an
`ignore_index` target contributes nothing (and no weight to the mean's denominator), and `mean`
divides by the summed weights of the targets it counted.
"""
from __future__ import annotations

import torch.nn.functional as F

from ...ir import Node
from .common import Kernel, kernel


def _options(node: Node) -> dict:
    # without ignore_index every target counts; torch's default (-100) is no class index either
    ignore = node.attr("ignore_index")
    return {"reduction": node.attr("reduction", "mean"),
            **({} if ignore is None else {"ignore_index": ignore})}


@kernel("NegativeLogLikelihoodLoss")
def _nll_loss(node: Node) -> Kernel:
    options, nll = _options(node), F.nll_loss
    return lambda log_prob, target, weight=None: nll(log_prob, target.long(), weight, **options)


@kernel("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(node: Node) -> Kernel:
    options, nll, log_softmax = _options(node), F.nll_loss, F.log_softmax
    if len(node.outputs) == 1:
        ce = F.cross_entropy
        return lambda scores, labels, weight=None: ce(scores, labels.long(), weight, **options)

    def run(scores, labels, weight=None):   # the log-probabilities are an output too
        log_prob = log_softmax(scores, 1)
        return nll(log_prob, labels.long(), weight, **options), log_prob
    return run
