"""Scatter-add along one axis: the gradient of a gather (embeddings, x[..., positions, ...])."""
from ._math import jit


@jit
def add_along(out, g, positions):
    """out[b, positions[i], a] += g[b, i, a] for every i in order, so a repeated position
    adds its occurrences as np.add.at does. out (before, n, after), g (before, m, after)."""
    for b in range(g.shape[0]):
        for i in range(g.shape[1]):
            p = positions[i]
            for a in range(g.shape[2]):
                out[b, p, a] += g[b, i, a]
