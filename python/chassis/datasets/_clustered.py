"""Generated data: a Gaussian mixture with dense and sparse regions, as embeddings have."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


# ====================================================================== generated data
def clustered(
    n: int,
    dims: int,
    n_queries: int,
    clusters: int = 64,
    seed: int = 0,
    spread: float = 0.35,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Generate `n` base vectors and `n_queries` queries from one Gaussian mixture, as float32.

    Cluster centres are standard normal; each cluster has its own width, between 0.5x and 1.5x
    `spread` times the typical distance between centres, and its own share of the points, so
    the data has dense and sparse regions as embeddings do. Queries are fresh draws from the
    same mixture. Same arguments, same arrays.

    Parameters
    ----------
    n : int
        Base vectors, at least 1.
    dims : int
        Dimensions, at least 1.
    n_queries : int
        Queries, 0 or more.
    clusters : int, default: 64
        Clusters in the mixture, at least 1.
    seed : int, default: 0
        Seed of the random generator.
    spread : float, default: 0.35
        Cluster width relative to the typical distance between centres (on average; each
        cluster's is 0.5x to 1.5x this).

    Returns
    -------
    base : numpy.ndarray
        (n, dims) float32.
    queries : numpy.ndarray
        (n_queries, dims) float32.

    Raises
    ------
    ValueError
        `n`, `dims` or `clusters` is below 1, or `n_queries` below 0.

    Examples
    --------
    >>> import numpy as np
    >>> from chassis.datasets import clustered
    >>> base, queries = clustered(1_000, 32, 10, seed=1)
    >>> base.shape, queries.shape, base.dtype
    ((1000, 32), (10, 32), dtype('float32'))
    >>> np.array_equal(clustered(1_000, 32, 10, seed=1)[0], base)
    True
    """
    if n < 1 or dims < 1 or n_queries < 0 or clusters < 1:
        raise ValueError("n, dims and clusters must be positive and n_queries non-negative")
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims), dtype=np.float32)
    # per-axis standard deviation: centres are ~sqrt(2 * dims) apart, a point ~sqrt(dims) * sigma
    # from its centre, so sigma = spread * sqrt(2) puts it at `spread` of the inter-centre distance
    widths = (spread * np.sqrt(2.0) * rng.uniform(0.5, 1.5, clusters)).astype(np.float32)
    weights = rng.dirichlet(np.full(clusters, 2.0))

    def draw(count: int) -> npt.NDArray[np.float32]:
        out = np.empty((count, dims), dtype=np.float32)
        step = 65_536  # generate in chunks to keep temporaries small
        for start in range(0, count, step):
            stop = min(count, start + step)
            which = rng.choice(clusters, size=stop - start, p=weights)
            noise = rng.standard_normal((stop - start, dims), dtype=np.float32)
            out[start:stop] = centres[which] + noise * widths[which, None]
        return out

    return draw(n), draw(n_queries)
