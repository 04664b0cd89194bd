"""Communication graphs: the full graph (Bonawitz et al. 2017) and SecAgg+ Harary graphs (Bell et al. 2020).

SecAgg+ places the checked-in clients on a ring in a uniformly random order (from a 32-byte public graph
seed, via the AES-CTR PRG) and links each to the floor(k/2) nearest clients on either side; for odd k also
to the client floor(n/2) places away (the Harary graph H_{k,n}: k-regular for even k or even n, otherwise
a few nodes get degree k + 1). Each client masks with, and Shamir-shares to, its neighbours only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.crypto.prg import keystream
from secagg_dp.errors import ParameterError

__all__ = ["ring_order", "neighbourhoods", "neighbours_of", "secaggplus_parameters"]


def ring_order(ids: Sequence[int], graph_seed: bytes) -> np.ndarray:
    """The clients sorted by a 128-bit pseudorandom key each (uniform order up to 2^-64 collisions)."""
    ids_arr = np.asarray(sorted(ids), dtype=np.int64)
    keys = np.frombuffer(keystream(graph_seed, 16 * ids_arr.size), dtype="<u8").reshape(-1, 2)
    return ids_arr[np.lexsort((keys[:, 1], keys[:, 0]))] if ids_arr.size else ids_arr


def neighbourhoods(ids: Sequence[int], k: int | None, graph_seed: bytes) -> dict[int, frozenset[int]]:
    """Neighbour sets (without the client itself). ``k=None`` or ``k >= n - 1``: everyone else."""
    n = len(ids)
    if k is None or k >= n - 1:
        everyone = frozenset(ids)
        return {u: everyone - {u} for u in ids}
    k = check_int("k", k, lo=1)
    order = ring_order(ids, graph_seed)
    offsets = [d for j in range(1, k // 2 + 1) for d in (j, -j)]
    if k % 2:
        offsets += [n // 2, -(n // 2)]
    pos = np.arange(n)
    nbr = order[(pos[:, None] + np.asarray(offsets)[None, :]) % n]
    return {int(order[i]): frozenset(int(v) for v in nbr[i]) - {int(order[i])} for i in range(n)}


def neighbours_of(ids: Sequence[int], k: int | None, graph_seed: bytes, client: int) -> frozenset[int]:
    """One client's neighbour set, equal to ``neighbourhoods(ids, k, graph_seed)[client]`` at O(n log n) cost."""
    n = len(ids)
    if k is None or k >= n - 1:
        return frozenset(ids) - {client}
    order = ring_order(ids, graph_seed)
    (hit,) = np.nonzero(order == client)
    if hit.size != 1:
        raise ParameterError(f"Argument 'client' must be one of 'ids', not {client}.")
    offsets = [d for j in range(1, k // 2 + 1) for d in (j, -j)]
    if k % 2:
        offsets += [n // 2, -(n // 2)]
    return frozenset(int(v) for v in order[(int(hit[0]) + np.asarray(offsets)) % n]) - {client}


def secaggplus_parameters(
    n: int,
    *,
    dropout_fraction: float,
    corrupt_fraction: float = 0.0,
    security_bits: float = 40.0,
    correctness_bits: float = 20.0,
) -> tuple[int, int]:
    """Smallest even k and a threshold t for SecAgg+ with n clients; returns (k, t).

    Design rule following Bell et al. 2020 (Sec. 3-4: neighbourhood conditions for correctness and
    security under a random graph), evaluated exactly for our ring construction, where one client's
    neighbourhood is a uniform k-subset of the others. With D ~ Hypergeom(n-1, floor(delta (n-1)), k)
    dropped and C ~ Hypergeom(n-1, ceil(gamma (n-1)), k) corrupted neighbours, union-bounded over n clients:
      correctness: n * P[k + 1 - D < t] <= 2^-eta      (t shares survive in every neighbourhood)
      security:    n * P[C >= t] <= 2^-sigma            (colluders never hold t shares of an honest secret)
                   n^2 (delta + gamma)^k <= 2^-sigma     (no two runs of k/2 removed ring neighbours, so
                                                         the honest surviving clients stay connected)
    plus t > (k + 1) / 2 so that one honest client's shares of b_u and sk_u cannot both be assembled.
    This is an upper-bound design rule, not the paper's own tables; it assumes dropouts and corruptions
    are chosen independently of the (public) graph seed.
    """
    n = check_int("n", n, lo=3)
    delta = check_probability("dropout_fraction", dropout_fraction, allow_one=False)
    gamma = check_probability("corrupt_fraction", corrupt_fraction, allow_one=False)
    sigma = check_real("security_bits", security_bits, lo=1.0)
    eta = check_real("correctness_bits", correctness_bits, lo=1.0)
    if delta + gamma >= 0.5:
        raise ParameterError(
            f"Arguments 'dropout_fraction' + 'corrupt_fraction' must be < 0.5, not {delta + gamma}. "
            "To fix, use the full graph (neighbours=None) with a threshold chosen for that regime."
        )
    n_drop = math.floor(delta * (n - 1))
    n_bad = math.ceil(gamma * (n - 1))
    log2n = math.log2(n)
    for k in range(2, n - 1, 2):
        if delta + gamma > 0 and 2 * log2n + k * math.log2(delta + gamma) > -sigma:
            continue
        drop = stats.hypergeom(n - 1, n_drop, k)
        bad = stats.hypergeom(n - 1, n_bad, k)
        for t in range(k // 2 + 1, k + 2):
            # correctness: k + 1 - D >= t  <=>  D <= k + 1 - t; failure P[D >= k + 2 - t]
            fail = drop.sf(k + 1 - t)
            leak = bad.sf(t - 1)
            if log2n + math.log2(max(fail, 1e-300)) <= -eta and log2n + math.log2(max(leak, 1e-300)) <= -sigma:
                return k, t
    raise ParameterError(
        f"No k < n - 1 meets the targets for n={n}; use the full graph (neighbours=None) instead."
    )
