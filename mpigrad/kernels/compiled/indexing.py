"""Scatter-add along one axis: the gradient of a gather (embeddings, x[..., positions, ...])."""
from numba import prange

from ._threads import parallel


@parallel(partitioned=True)
def add_along(out, g, positions, parts):
    """out[b, positions[i], a] += g[b, i, a] for every i in order, so a repeated position
    adds its occurrences as np.add.at does. out (before, n, after), g (before, m, after).

    Threads take the rows of `out` in `parts` ranges per b, each scanning every position for
    those in its range: each element still adds its occurrences in the order of i, so the
    result does not depend on `parts`."""
    rows = out.shape[1]
    for task in prange(g.shape[0] * parts):
        b = task // parts
        part = task % parts
        low = rows * part // parts
        high = rows * (part + 1) // parts
        for i in range(g.shape[1]):
            p = positions[i]
            if low <= p < high:
                for a in range(g.shape[2]):
                    out[b, p, a] += g[b, i, a]
