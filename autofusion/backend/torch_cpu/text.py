"""Text features: TfIdfVectorizer over integer token ids (string tensors are not PyTorch's)."""
from __future__ import annotations

import numpy as np
import torch

from ...errors import KernelBuildError
from ...ir import Node
from .common import Kernel, kernel


def ngram_columns(node: Node) -> dict[tuple, int]:
    """The pool's n-grams of the lengths counted (min_gram_length … max_gram_length) → their
    output column. pool_int64s holds the 1-grams from ngram_counts[0], the 2-grams from
    ngram_counts[1], …; ngram_indexes maps the i-th n-gram of the whole pool to its column."""
    pool, counts = node.attr("pool_int64s"), node.attr("ngram_counts")
    columns = node.attr("ngram_indexes")
    lo, hi = node.attr("min_gram_length"), node.attr("max_gram_length")
    table, index = {}, 0
    for n, start in enumerate(counts, 1):
        end = counts[n] if n < len(counts) else len(pool)
        for at in range(start, end, n):
            if lo <= n <= hi:
                table.setdefault(tuple(pool[at:at + n]), columns[index])
            index += 1
    return table


@kernel("TfIdfVectorizer")
def _tfidf_vectorizer(node: Node) -> Kernel:
    """Per row of token ids, how often each pool n-gram occurs, its items up to max_skip_count
    apart (1-grams counted once, not once per skip); TF gives the counts, IDF the weights where a
    count is not 0, TFIDF weights · counts (weights default to 1)."""
    if node.attr("pool_strings"):
        raise KernelBuildError(f"TfIdfVectorizer {node.name!r}: string pools are not supported")
    table = ngram_columns(node)
    lo, hi = node.attr("min_gram_length"), node.attr("max_gram_length")
    max_skip = node.attr("max_skip_count")
    columns = node.attr("ngram_indexes")
    width, mode = max(columns) + 1, node.attr("mode")
    weights = np.ones(width, np.float32)   # the i-th weight is the i-th pool n-gram's, as ONNX Runtime
    if node.attr("weights"):
        weights[columns] = node.attr("weights")

    def counts_of(row: list[int]) -> np.ndarray:
        counts = np.zeros(width, np.float32)
        for skip in range(1, max_skip + 2):
            for start in range(len(row)):
                for n in range(max(lo, 1 if skip == 1 else 2), hi + 1):
                    last = start + (n - 1) * skip
                    if last >= len(row):
                        break
                    column = table.get(tuple(row[start:last + 1:skip]))
                    if column is not None:
                        counts[column] += 1
        return counts

    def run(x):
        rows = x.reshape(-1, x.shape[-1] if x.dim() else 1).tolist()
        tf = np.stack([counts_of(r) for r in rows])
        y = tf if mode == "TF" else (weights * (tf > 0) if mode == "IDF" else weights * tf)
        y = torch.from_numpy(y.astype(np.float32))
        return y if x.dim() == 2 else y.reshape(width)
    return run
