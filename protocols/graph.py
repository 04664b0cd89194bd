"""Communication graphs: the full graph (Bonawitz et al. 2017) and SecAgg+ Harary graphs (Bell et al. 2020).

SecAgg+ places the checked-in clients on a ring in a pseudorandom order (the client of rank i among the
sorted ids at position pi(i), pi a permutation of [0, n) keyed by the 32-byte public graph seed,
:class:`~secagg_dp.crypto.prp.FeistelPermutation`) and links each to the floor(k/2) nearest clients on
either side; for odd k also to the client floor(n/2) places away (the Harary graph H_{k,n}: k-regular for
even k or even n, otherwise a few nodes get degree k + 1). Each client masks with, and Shamir-shares to,
its neighbours only.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence

import numpy as np

from protocols.security import check_security
from protocols.statements import roster_statement  # defined with the other signed statements; importable here too
from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.crypto.prp import FeistelPermutation
from secagg_dp.errors import ParameterError

__all__ = [
    "ring_order",
    "RosterGraph",
    "roster_graph",
    "neighbourhoods",
    "neighbours_of",
    "neighbourhoods_for",
    "roster_graph_seed",
    "roster_statement",
    "index_graph",
    "two_hop_positions",
    "secaggplus_parameters",
    "holder_points",
]


def ring_order(ids: Sequence[int], graph_seed: bytes) -> np.ndarray:
    """The clients in ring order: position p holds the client whose rank among the sorted ids is
    pi^-1(p), pi the keyed permutation of :class:`RosterGraph`. Returns a read-only array; a pure function of
    (ids, graph_seed), remembered for the last few rosters (see :func:`roster_graph`)."""
    return roster_graph(ids, None, graph_seed).order


class RosterGraph:
    """The communication graph of one roster; a lookup costs O(degree), never O(n).

    ``ids`` are the roster's client ids (any order, distinct; ``None``: the leaf indices 0..n-1 of an
    n-entry roster, see :func:`index_graph`), ``k=None`` or ``k >= n - 1`` the full graph. The ring puts
    the client of rank i among the sorted ids at position pi(i), pi the keyed pseudorandom permutation of
    [0, n) (:class:`~secagg_dp.crypto.prp.FeistelPermutation`, keyed by the graph seed): a client finds its
    position with one evaluation of pi and its neighbours with one evaluation of pi^-1 per ring offset, so
    laying out its neighbourhood costs O(k) whatever n (before: n AES blocks and a sort). The whole-ring
    arrays :attr:`order` and :attr:`ring_pos` (O(n), for the server) are built on first use. Neighbour rows
    list the ids at fixed ring offsets from a client (no duplicates, never the client itself), so callers
    can work on (clients x degree) arrays instead of one set per client.
    """

    def __init__(
        self, ids: Sequence[int] | np.ndarray | None, k: int | None, graph_seed: bytes, *, n: int | None = None
    ) -> None:
        self._ids: np.ndarray | None
        if ids is None:
            self._ids = None  # the identity: leaf indices
            self.n = check_int("n", n, lo=0)
        else:
            if isinstance(ids, np.ndarray) and ids.size and bool((ids[1:] > ids[:-1]).all()):
                self._ids = ids.astype(np.int64)  # already sorted
            else:
                self._ids = np.asarray(sorted(ids), dtype=np.int64)
            self._ids.flags.writeable = False
            self.n = self._ids.size
        n = self.n
        self.perm = FeistelPermutation(n, bytes(graph_seed)) if n else None
        self._order: np.ndarray | None = None
        self._ring_pos: np.ndarray | None = None
        self._rank_at: np.ndarray | None = None
        self.full = k is None or k >= n - 1
        self.k = None if self.full else check_int("k", k, lo=1)
        kk = self.k or 0  # the degree when not full
        offsets = [] if self.full else [d for j in range(1, kk // 2 + 1) for d in (j, -j)]
        if not self.full and kk % 2:
            offsets += [n // 2] if n % 2 == 0 else [n // 2, -(n // 2)]  # the chord; one offset when n is even
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.two_hop_offsets: np.ndarray | None = None  # filled by two_hop_positions
        self.offsets.flags.writeable = False

    def __repr__(self) -> str:
        return f"RosterGraph(n={self.n}, k={self.k})"

    @property
    def ids(self) -> np.ndarray:
        """The sorted ids (for an index graph, 0..n-1, built on first use)."""
        if self._ids is None:
            self._ids = np.arange(self.n, dtype=np.int64)
            self._ids.flags.writeable = False
        return self._ids

    def _build(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole-ring arrays, O(n): pi on every rank (vectorised), and its inverse by scattering."""
        ring_pos = self.perm.forward(np.arange(self.n)) if self.perm else np.zeros(0, dtype=np.int64)
        rank_at = np.empty(self.n, dtype=np.int64)
        rank_at[ring_pos] = np.arange(self.n)
        order = rank_at if self._ids is None else self._ids[rank_at]
        for arr in (ring_pos, rank_at, order):
            arr.flags.writeable = False
        self._ring_pos, self._rank_at, self._order = ring_pos, rank_at, order
        return ring_pos, rank_at, order

    def _ring(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rank -> ring position, ring position -> rank, ring position -> id) for the whole ring, built on
        first use."""
        if self._ring_pos is not None and self._rank_at is not None and self._order is not None:
            return self._ring_pos, self._rank_at, self._order
        return self._build()

    @property
    def order(self) -> np.ndarray:
        """Ring position -> client id, for the whole ring (O(n), built on first use)."""
        return self._ring()[2]

    @property
    def ring_pos(self) -> np.ndarray:
        """Rank among the sorted ids -> ring position, for the whole ring (O(n), built on first use)."""
        return self._ring()[0]

    def _bulk(self, count: int) -> bool:
        """Whether ``count`` lookups should go through the whole-ring arrays: when they exist, or when the
        lookups are a good part of the ring (the server's); a client's O(k) lookups use pi directly."""
        return self._ring_pos is not None or 8 * count >= self.n

    def _pi(self, arg: str, values: np.ndarray | Sequence[int], inverse: bool) -> np.ndarray:
        """pi (``inverse=False``: rank -> ring position) or pi^-1, element-wise on ``values`` (argument ``arg``):
        through the whole-ring array when :meth:`_bulk` says so, else through the permutation itself."""
        v = np.asarray(values, dtype=np.int64).reshape(-1)
        if self._bulk(v.size):
            out: np.ndarray = self._ring()[int(inverse)][v]
            return out
        if self.perm is None:
            raise ParameterError(f"Argument '{arg}' must be empty for an empty roster.")
        return self.perm.inverse(v) if inverse else self.perm.forward(v)

    def position_of(self, ranks: np.ndarray | Sequence[int]) -> np.ndarray:
        """Ring positions of the clients of the given ranks among the sorted ids (pi, element-wise)."""
        return self._pi("ranks", ranks, inverse=False)

    def rank_at(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """Ranks among the sorted ids of the clients at the given ring positions (pi^-1, element-wise)."""
        return self._pi("positions", positions, inverse=True)

    def at(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """Ids of the clients at the given ring positions."""
        p = np.asarray(positions, dtype=np.int64).reshape(-1)
        if self._bulk(p.size):
            out: np.ndarray = self.order[p]
            return out
        ranks = self.rank_at(p)
        return ranks if self._ids is None else self._ids[ranks]

    def index(self, clients: Sequence[int] | np.ndarray) -> np.ndarray:
        """Positions of ``clients`` in the sorted ids; an id not in the roster raises ParameterError."""
        us = np.asarray(clients, dtype=np.int64).reshape(-1)
        if self._ids is None:  # index graph: ids are the ranks
            bad = (us < 0) | (us >= self.n)
            at = us
        else:
            at = np.searchsorted(self._ids, us)
            bad = (at >= self.n) | (self._ids[np.minimum(at, self.n - 1)] != us) if self.n else np.ones(us.size, bool)
        if bad.any():
            raise ParameterError(f"Argument 'clients' must be a subset of 'ids'; {int(us[bad][0])} is not in it.")
        return at

    def rows(self, clients: Sequence[int] | np.ndarray) -> np.ndarray:
        """(len(clients), degree) array: row i holds the neighbours of ``clients[i]`` (SecAgg+ only)."""
        if self.full:
            raise ParameterError("Argument 'k' is the full graph, whose rows are the whole roster; use the sets.")
        at = self.position_of(self.index(clients))
        window = (at[:, None] + self.offsets[None, :]) % self.n
        rows: np.ndarray = self.at(window.ravel()).reshape(window.shape)
        return rows

    def neighbours(self, client: int) -> frozenset[int]:
        """One client's neighbour set (without the client itself)."""
        if self.full:
            self.index([client])
            return frozenset(self.ids.tolist()) - {int(client)}
        return frozenset(self.rows([client])[0].tolist())

    def neighbour_sets(self, clients: Sequence[int] | np.ndarray | None = None) -> dict[int, frozenset[int]]:
        """Neighbour sets of ``clients`` (default: everyone), keyed by client id."""
        us = self.ids if clients is None else np.asarray(clients, dtype=np.int64).reshape(-1)
        if self.full:
            self.index(us)
            everyone = frozenset(self.ids.tolist())
            return {u: everyone - {u} for u in us.tolist()}
        return {u: frozenset(row) for u, row in zip(us.tolist(), self.rows(us).tolist(), strict=True)}


_CACHE_SIZE = 4
_cache: list[tuple[tuple[int, ...], bytes, int | None, RosterGraph]] = []
_cache_lock = threading.Lock()


def roster_graph(ids: Sequence[int], k: int | None, graph_seed: bytes) -> RosterGraph:
    """The :class:`RosterGraph` of (ids, k, graph_seed), remembered for the last few rosters.

    Where one process plays every client of a round (the simulation), each would otherwise build the ring
    again, O(n^2 log n) in all. A hit costs O(1) when ``ids`` is the very tuple of the cached roster (every
    client holds the same parsed roster), otherwise one tuple comparison.
    """
    key = ids if isinstance(ids, tuple) else tuple(int(v) for v in ids)
    seed = bytes(graph_seed)
    with _cache_lock:
        for entry in _cache:
            c_ids, c_seed, c_k, graph = entry
            if c_seed == seed and c_k == k and (c_ids is key or c_ids == key):
                return graph
    graph = RosterGraph(key, k, seed)
    with _cache_lock:
        _cache.insert(0, (key, seed, k, graph))
        del _cache[_CACHE_SIZE:]
    return graph


def neighbourhoods(ids: Sequence[int], k: int | None, graph_seed: bytes) -> dict[int, frozenset[int]]:
    """Neighbour sets (without the client itself). ``k=None`` or ``k >= n - 1``: everyone else."""
    n = len(ids)
    if k is None or k >= n - 1:
        everyone = frozenset(ids)
        return {u: everyone - {u} for u in ids}
    k = check_int("k", k, lo=1)
    graph = roster_graph(ids, k, graph_seed)
    return graph.neighbour_sets(graph.order)


def neighbours_of(ids: Sequence[int], k: int | None, graph_seed: bytes, client: int) -> frozenset[int]:
    """One client's neighbour set, equal to ``neighbourhoods(ids, k, graph_seed)[client]`` at O(k) cost once
    the roster's graph is built (:func:`roster_graph`)."""
    n = len(ids)
    if k is None or k >= n - 1:
        return frozenset(ids) - {client}
    try:
        return roster_graph(ids, k, graph_seed).neighbours(client)
    except ParameterError:
        raise ParameterError(f"Argument 'client' must be one of 'ids', not {client}.") from None


def neighbourhoods_for(
    ids: Sequence[int], k: int | None, graph_seed: bytes, clients: Sequence[int]
) -> dict[int, frozenset[int]]:
    """``neighbourhoods(ids, k, graph_seed)`` restricted to ``clients``, at O(k) per client."""
    n = len(ids)
    if k is None or k >= n - 1:
        everyone = frozenset(ids)
        return {int(u): everyone - {int(u)} for u in clients}
    return roster_graph(ids, k, graph_seed).neighbour_sets(list(clients))


def roster_graph_seed(round_id: bytes, n: int, root: bytes) -> bytes:
    """The SecAgg+ graph seed: SHA-256 of the roster statement (:func:`roster_statement`).

    The roster is committed (root and n) before the seed exists, so the server cannot place clients after
    seeing positions; any other roster it builds (another set of admitted check-ins) is a fresh uniform graph.
    What remains is grinding: trying many rosters and keeping the best, which ``secaggplus_parameters``
    counts with ``grinding_bits`` (see docs/secure-aggregation.md).
    """
    return hashlib.sha256(b"secagg-dp/v3/graph-seed\x00" + roster_statement(round_id, n, root)).digest()


_index_cache: list[tuple[int, int | None, bytes, RosterGraph]] = []


def index_graph(n: int, k: int | None, graph_seed: bytes) -> RosterGraph:
    """The graph over the roster's leaf indices 0..n-1 (the roster is sorted by id, so index i is the i-th
    smallest id): the same ring as :func:`roster_graph` on the ids, built from n and the seed alone, which is
    all a client that holds only its neighbourhood knows. Remembered for the last few rosters."""
    seed = bytes(graph_seed)
    with _cache_lock:
        for c_n, c_k, c_seed, graph in _index_cache:
            if c_n == n and c_k == k and c_seed == seed:
                return graph
    graph = RosterGraph(None, k, seed, n=n)
    with _cache_lock:
        _index_cache.insert(0, (n, k, seed, graph))
        del _index_cache[_CACHE_SIZE:]
    return graph


def two_hop_positions(graph: RosterGraph, position: int) -> np.ndarray:
    """Sorted ring positions within two hops of ``position`` (itself, its neighbours and theirs): the holders
    of every secret whose share a client at ``position`` holds. SecAgg+ only."""
    if graph.two_hop_offsets is None:  # once per graph
        one = np.concatenate([[0], graph.offsets])
        graph.two_hop_offsets = np.unique((one[:, None] + one[None, :]).ravel())
    out: np.ndarray = np.unique((position + graph.two_hop_offsets) % graph.n)
    return out


def secaggplus_parameters(
    n: int,
    *,
    dropout_fraction: float,
    corrupt_fraction: float | None = None,
    security: str = "active",
    security_bits: float = 40.0,
    correctness_bits: float = 20.0,
    corrupt_clients: int | None = None,
    min_roster: int | None = None,
    grinding_bits: float = 0.0,
) -> tuple[int, int]:
    """Smallest even k and the smallest safe threshold t for SecAgg+ with up to n clients; returns (k, t).

    Design rule from the conditions of Bell et al. 2020 (Sec. 3-4), evaluated exactly for a uniformly random
    ring, where one client's neighbourhood is a uniform k-subset of the others; our ring is a keyed Feistel
    permutation modelled as uniform (an assumption, not a theorem: docs/secure-aggregation.md, "The ring
    layout"). The adversary
    controls c clients in absolute number (``corrupt_clients``; or c = ceil(gamma (n - 1)) from
    ``corrupt_fraction`` gamma), the roster has between N = ``min_roster`` (default n; the clients' own
    minimum) and n entries, and the server may build 2^g candidate rosters and keep the one it likes best
    (``grinding_bits`` g; each is a fresh uniform graph, since the graph seed is a hash of the committed
    roster). With C ~ Hypergeom(N - 1, c, k) corrupt neighbours (the worst roster size: fewer honest clients
    dilute the colluders less), D ~ Hypergeom(N - 1, floor(delta (N - 1)), k) dropped neighbours, union
    bounds over the n victims (and the 2^g rosters), and c* the smallest c' with 2^g n P[C > c'] <= 2^-sigma:
      connectivity: 2^g n^2 (delta + c / (N - 1))^k <= 2^-sigma   (no two runs of k/2 removed ring
                                                        neighbours, so the honest surviving clients stay connected)
      security:     semi-honest  t >= c* + 1            (colluders never hold t shares of an honest secret)
                    active       2t - (k + 1) >= c* + 1 (an inconsistent survivor list needs 2t - (k + 1)
                                                        colluding holders; see protocols.security)
                    both         t > (k + 1) / 2
      correctness:  n P[k + 1 - D < t] <= 2^-eta        (t shares survive in every neighbourhood)
    Feasible only if c / (N - 1) + delta < 1 (semi-honest) or c / (N - 1) + 2 delta < 1 (active). With the
    defaults (N = n, g = 0) this is the rule for corruptions independent of the graph; see
    docs/secure-aggregation.md for the guarantee it gives against a server that grinds.
    """
    n = check_int("n", n, lo=3)
    delta = check_probability("dropout_fraction", dropout_fraction, allow_one=False)
    if (corrupt_fraction is None) == (corrupt_clients is None):
        raise ParameterError(
            "Exactly one of the arguments 'corrupt_fraction' and 'corrupt_clients' must be given, not "
            f"{corrupt_fraction!r} and {corrupt_clients!r}."
        )
    security = check_security(security)
    sigma = check_real("security_bits", security_bits, lo=1.0)
    eta = check_real("correctness_bits", correctness_bits, lo=1.0)
    g = check_real("grinding_bits", grinding_bits, lo=0.0)
    pop = n if min_roster is None else check_int("min_roster", min_roster, lo=3, hi=n)
    if corrupt_clients is None:
        gamma = check_probability("corrupt_fraction", corrupt_fraction, allow_one=False)
        n_bad = math.ceil(gamma * (n - 1))
    else:
        n_bad = check_int("corrupt_clients", corrupt_clients, lo=0, hi=pop - 2)
    n_bad = min(n_bad, pop - 1)
    gamma_eff = n_bad / (pop - 1)
    active = security == "active"
    if (gamma_eff + 2 * delta if active else gamma_eff + delta) >= 1:
        raise ParameterError(
            f"Arguments 'corrupt_fraction' (or 'corrupt_clients' / 'min_roster': {n_bad} of {pop}) and "
            f"'dropout_fraction' = {delta} admit no threshold in {security} mode (need "
            f"{'corrupt + 2 dropout' if active else 'corrupt + dropout'} < 1). To fix, lower one of them."
        )
    n_drop = math.floor(delta * (pop - 1))
    log2n = math.log2(n)
    from scipy import stats  # lazy: scipy.stats costs ~75 MB of RSS and about 1 s in every process importing us

    for k in range(2, pop - 1, 2):
        if delta + gamma_eff > 0 and g + 2 * log2n + k * math.log2(delta + gamma_eff) > -sigma:
            continue
        bad = stats.hypergeom(pop - 1, n_bad, k)
        c_star = next(c for c in range(k + 1) if c >= n_bad or g + log2n + math.log2(max(bad.sf(c), 1e-300)) <= -sigma)
        t = max(k // 2 + 1, (c_star + k + 1) // 2 + 1 if active else c_star + 1)
        if t > k + 1:
            continue
        # correctness: k + 1 - D >= t  <=>  D <= k + 1 - t; failure P[D >= k + 2 - t]
        fail = stats.hypergeom(pop - 1, n_drop, k).sf(k + 1 - t)
        if log2n + math.log2(max(fail, 1e-300)) <= -eta:
            return k, t
    raise ParameterError(f"No k < n - 1 meets the targets for n={n}; use the full graph (neighbours=None) instead.")


def holder_points(holders: Sequence[int]) -> dict[int, int]:
    """Shamir evaluation points of one secret's holders: 1 + rank of the holder's id among them.

    Points need only be distinct among the holders of one secret, so with SecAgg+ they lie in
    [1, k + 1] whatever the number of clients (the field GF(65537) bounds k + 1, not n).
    """
    return {int(v): i + 1 for i, v in enumerate(sorted(holders))}
