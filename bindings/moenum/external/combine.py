"""moenum's own combine for external backends (numerics.md §1): each token's routed rows, in
ascending expert id, summed in fp32 and rounded once to the output dtype; the same rule as the
built-in backends, so y and dx are checked bitwise whoever computed the rows."""
from __future__ import annotations

import numpy as np

from .. import _core


def combine_index(row_token: np.ndarray, row_slot: np.ndarray, tokens: int, topk: int) -> np.ndarray:
    """[T, k] rows of each token's routed pairs in row order (rows ascend by expert), -1 = none."""
    index = np.full((tokens, topk), -1, dtype=np.int64)
    fill = np.zeros(tokens, dtype=np.int64)
    for r in np.nonzero(row_slot >= 0)[0]:
        t = row_token[r]
        index[t, fill[t]] = r
        fill[t] += 1
    return index


def combine(rows: np.ndarray, index: np.ndarray, dtype: str) -> np.ndarray:
    """round(sum of rows[index[t, :]]) per token, fp32 accumulation in index order."""
    acc = np.zeros((index.shape[0], rows.shape[1]), dtype=np.float32)
    for s in range(index.shape[1]):
        sel = index[:, s] >= 0
        acc[sel] = acc[sel] + rows[index[sel, s]].astype(np.float32)
    if dtype == "fp32":
        return acc
    return _core.round_to(acc.astype(np.float64), dtype).astype(np.float32)
