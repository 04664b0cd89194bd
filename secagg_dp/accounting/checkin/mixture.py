"""Distributed check-in accountant: each of n clients checks in with probability gamma; K ~ Bin(n, gamma).

Neighbouring relation: ``replace-one`` (client level) unless the per-k provider says otherwise (the
local-steps provider of :mod:`secagg_dp.accounting.checkin.local_steps` is sample-level add/remove).

RDP of one round (SCI22 Thm 1 / Eq. 5, LHT22 Thm 2 & Thm 4, with the k = 0 term kept):

    eps(lam) <= 1/(lam-1) log sum_{k=0}^{n} P(K=k) exp((lam-1) eps'_k(lam))
              = 1/(lam-1) log(1 + sum_{k>=1} P(K=k) expm1((lam-1) eps'_k(lam)))

where eps'_k is the RDP of the k-client base mechanism subsampled without replacement at rate k/n
(LHT22; the draft SCI22 Thm 4 writes gamma, offered only as ``rate="gamma"``, a labelled comparison),
bounded for a Gaussian base by the Rényi divergence of the symmetrised dominating pair (ZDW22;
:mod:`secagg_dp.accounting.core.pairs`; WBK19 Theorem 27 on request) and by WBK19 Theorem 9 otherwise
(``amplification="thm9"`` reproduces the 2.204708 known answer), capped by the base RDP. The subsampling
bounds are the core's (:mod:`secagg_dp.accounting.core.subsampling`, :mod:`~secagg_dp.accounting.core.pairs`),
evaluated for every k of a batch at once. The sum is exact on a core window of k around
n*gamma; outside it, blocks of k are bounded by (rigorous block mass bound) x (per-k bound evaluated at the
block's worst ends), and blocks whose bound is not negligible are split until they are (adaptive
refinement); the result is never below the exact sum. The "1 + sum expm1" form keeps full relative
accuracy when eps is tiny.

Window certificate (beyond the seeds; proof in README.md, "Window certificate"): K is data independent, so
conditioning every round on K in [k_lo, k_hi] changes the output distribution by at most
P(some K_t outside) <= T P(K not in W) in total variation, giving
delta_total = delta_RDP + (1 + e^eps) T P(K not in W).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin._record import DetailCertificate, DetailField, as_is, coalition_detail, int_pair
from secagg_dp.accounting.checkin.tails import binom_window_edge, log_binom_pmf, log_binom_tail_ub
from secagg_dp.accounting.core.accountant import _UNSET, _field_or_detail
from secagg_dp.accounting.core.accountant import OBSERVERS as _CORE_OBSERVERS
from secagg_dp.accounting.core.conversion import LargestOrderWarning, rdp_to_dp
from secagg_dp.accounting.core.logspace import log_expm1
from secagg_dp.accounting.core.pairs import wor_gaussian_pair_log_am1
from secagg_dp.accounting.core.subsampling import wor_subsampled_gaussian_log_am1, wor_subsampled_log_am1
from secagg_dp.errors import ParameterError

__all__ = [
    "CHECKIN_ORDERS",
    "LEDGER_ORDERS",
    "DEFAULT_ORDERS",
    "checkin_orders",
    "BaseMechanism",
    "PerKProvider",
    "SubsampledCheckin",
    "PerKTable",
    "MixtureResult",
    "CheckinCertificate",
    "OBSERVERS",
    "checkin_mixture",
    "checkin_rdp",
    "checkin_epsilon",
    "window_certificate",
    "rdp_to_epsilon",
]


def checkin_orders(max_order: int = 1024) -> np.ndarray:
    """The check-in order grid up to ``max_order``: every integer 2..256, then every 16th integer and
    ``max_order`` itself. Above 256 the optimal order moves by a few percent per step, so the sparse tail
    costs a negligible epsilon (the conversion is flat near its optimum) at a fraction of the work."""
    max_order = check_int("max_order", max_order, lo=2)
    dense = np.arange(2, min(max_order, 256) + 1, dtype=np.int64)
    sparse = np.arange(272, max_order + 1, 16, dtype=np.int64)
    return np.unique(np.concatenate([dense, sparse, [max_order]]))


# Orders up to 1024: at small delta the optimum sits above 256 (n = 6e5, gamma = 1e-3, delta = 1e-8, T = 10:
# the window certificate falls from 0.047 at 256 to 0.010 at 1024 with the dominating-pair bound).
CHECKIN_ORDERS = checkin_orders(1024)
"""The check-in accountant's default orders: integers only (its subsampling bounds need them), 2..256 then every
16th to 1024. Differs on purpose from the core's ``DEFAULT_ORDERS`` (which has fractional orders)."""
CHECKIN_ORDERS.setflags(write=False)
#: The ledger grid of the simulator and of the Flower server: the integers 2..256 (``checkin_orders(256)``).
LEDGER_ORDERS = checkin_orders(256)
LEDGER_ORDERS.setflags(write=False)
DEFAULT_ORDERS = CHECKIN_ORDERS  # the former name, kept importable: checkin.DEFAULT_ORDERS is CHECKIN_ORDERS
#: Largest exact core (client counts k evaluated one by one): bounds the work at about a minute and 2.5 GB
#: (n = 1e9 at gamma = 0.1 has 113 843); larger cores are refused, naming the limit.
MAX_EXACT_CORE = 2**17
_ROUNDING_GUARD = 1e-12  # relative inflation of sum P(k) expm1(.) covering float64 rounding of the sum


class BaseMechanism(Protocol):
    """A k-client mechanism: ``rdp_upper(k_lo, k_hi, orders)`` >= max_{k in [k_lo,k_hi]} eps_k(order)."""

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray: ...


class PerKProvider(Protocol):
    """Per-k RDP of the mixture terms: ``log_expm1_upper(k_lo, k_hi, orders)`` >= max over the block of
    log(expm1((lam-1) eps'_k(lam))), exact when k_lo == k_hi. ``neighbouring`` names the relation."""

    @property
    def neighbouring(self) -> str: ...

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray: ...


_AMPLIFICATIONS = ("auto", "pair", "thm27", "thm9", "joint-convexity", "none")


@dataclass(frozen=True)
class SubsampledCheckin:
    """eps'_k = min(subsampled bound at rate q_k, base eps_k) for the k-client ``mechanism`` among n clients.

    ``rate="k/n"`` (LHT22, correct) or ``rate="gamma"`` (the SCI22 draft, labelled comparison only; then
    ``gamma`` must be given). ``amplification`` (all sampling without replacement, replace-one, WBK19):

    * ``"auto"`` (default, the tightest valid bound): ``"pair"`` when the mechanism is a Gaussian sum
      (it has ``noise_multiplier(k)``), Theorem 9 otherwise, and never above the joint-convexity term
      (the server's exact revealed-flag value; the analyst's view is a post-processing of the server's);
    * ``"pair"``: the Rényi divergence of the symmetrised dominating pair of Zhu, Dong & Wang (2022, Thm 10)
      for the k-client Gaussian sum, computed numerically as a rigorous upper bound
      (:func:`~secagg_dp.accounting.core.pairs.wor_gaussian_pair_log_am1`; Gaussian sums only). Measured
      0.24-0.54x Theorem 27 in RDP and never above it on a grid of z in [0.2, 100], q in [1e-6, 1],
      orders 2..256 (``tests/accounting/core/test_pairs.py``), so ``"auto"`` does not also evaluate Theorem 27;
    * ``"thm27"``: Theorem 27 (Gaussian sums only). It is Theorem 9 with each j >= 3 term replaced by the
      minimum of Theorem 9's term and a Gaussian-specific one, so it is termwise <= Theorem 9 on the same
      base curve: the minimum with Theorem 9 is built in, and the cap by the base RDP is applied here;
    * ``"thm9"``: Theorem 9 (any base; the known answer 2.204708 of our tests is defined with it);
    * ``"joint-convexity"``: 1 + q expm1((lam-1) eps_k), joint convexity of E_Q[(P/Q)^lam] over the coupled
      mixture; valid for any unit of privacy; ``"none"``: base only.

    Every bound is non-decreasing in q and in eps_k(j) (Theorem 27: in 1/z_k as well, its forward
    differences being power series in 1/(2 z^2) with non-negative coefficients), so block bounds use q at
    k_hi and the mechanism at k_lo (its block bound on eps, z at k_lo): an upper bound at the block's worst end.
    """

    mechanism: BaseMechanism
    n: int
    amplification: str = "auto"
    rate: str = "k/n"
    gamma: float | None = None
    neighbouring: str = "replace-one"

    def __post_init__(self) -> None:
        check_int("n", self.n, lo=1)
        if self.amplification not in _AMPLIFICATIONS:
            raise ParameterError(
                f"Argument 'amplification' must be one of {_AMPLIFICATIONS}, not {self.amplification!r}."
            )
        if self.amplification in ("pair", "thm27") and not hasattr(self.mechanism, "noise_multiplier"):
            raise ParameterError(
                f"Argument 'amplification' = {self.amplification!r} needs a Gaussian-sum mechanism (with "
                "noise_multiplier(k)), "
                f"not {type(self.mechanism).__name__}. To fix, use 'auto' or 'thm9'."
            )
        if self.rate not in ("k/n", "gamma"):
            raise ParameterError(f"Argument 'rate' must be 'k/n' or 'gamma', not {self.rate!r}.")
        if self.rate == "gamma":
            if self.gamma is None:
                raise ParameterError("Argument 'gamma' is required when rate='gamma'.")
            check_probability("gamma", self.gamma, allow_zero=False)

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> npt.NDArray[np.float64]:
        k_lo = np.asarray(k_lo, dtype=np.float64)
        k_hi = np.asarray(k_hi, dtype=np.float64)
        orders = np.asarray(orders, dtype=np.int64)
        method = self.amplification
        if method == "auto":
            method = "pair" if hasattr(self.mechanism, "noise_multiplier") else "thm9"
        base_all = None
        if method == "thm9":  # WBK19 Thm 9 at order lam needs the base at every integer 2..lam
            jmax = int(orders.max())
            js = np.arange(jmax + 1)
            base_all = np.zeros((k_lo.size, jmax + 1))
            base_all[:, 2:] = self.mechanism.rdp_upper(k_lo, k_hi, js[2:])
            base = base_all[:, orders]
        else:  # every other bound needs the base at the requested orders only
            base = np.asarray(self.mechanism.rdp_upper(k_lo, k_hi, orders), dtype=np.float64).reshape(
                k_lo.size, orders.size
            )
        with np.errstate(over="ignore"):  # (λ − 1)·ε beyond 1.8e308 is +inf
            cap = log_expm1((orders[None, :] - 1.0) * base)
        if self.amplification == "none":
            return cap
        q = k_hi / self.n if self.rate == "k/n" else np.full(k_lo.shape, float(self.gamma))  # type: ignore[arg-type]  # rate='gamma' requires gamma (__post_init__)
        with np.errstate(divide="ignore"):
            joint = np.log(q)[:, None] + cap
        if method == "pair":
            sub = self._pair(k_lo, k_hi, q, orders)
        elif method == "thm27":
            # __post_init__ admits 'thm27' only for a mechanism with noise_multiplier (a Gaussian sum)
            sub = wor_subsampled_gaussian_log_am1(self.mechanism.noise_multiplier(k_lo), q, orders)  # type: ignore[attr-defined]
        elif method == "thm9":
            assert base_all is not None  # computed above for thm9
            sub = wor_subsampled_log_am1(base_all, q, orders)
        else:
            sub = joint
        if self.amplification == "auto":  # the analyst sees a function of the server's view: never above it
            sub = np.minimum(sub, joint)
        result: npt.NDArray[np.float64] = np.minimum(sub, cap)
        return result

    def _pair(self, k_lo: np.ndarray, k_hi: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
        """The dominating-pair bound at (z at k_lo, rate q), with client counts coarsened to a geometric grid
        of ratio 1 + 1e-4 (k_lo rounded down, the rate's k rounded up: the pair at the coarse ends
        post-processes into every pair of the block, so the result is still an upper bound, about 3e-4
        relative above the exact one) and each distinct pair evaluated once. At n = 1e9 the exact core
        of +-6 standard deviations holds 12 000 client counts but only about 120 distinct coarse pairs."""
        lo, hi = coarse_counts(k_lo, k_hi, _PAIR_GRID, self.n)  # every k below 1e4 exact
        if self.rate == "k/n":
            q = hi / self.n
        keys = np.stack([lo, q], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        # 'pair' is admitted (or chosen by 'auto') only for a mechanism with noise_multiplier (a Gaussian sum)
        z = self.mechanism.noise_multiplier(uniq[:, 0])  # type: ignore[attr-defined]
        vals = wor_gaussian_pair_log_am1(z, uniq[:, 1], orders)
        return vals[inv.ravel()]


_PAIR_GRID = 1e-4


def coarse_counts(
    k_lo: np.ndarray, k_hi: np.ndarray, ratio: float, n: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A block [k_lo, k_hi] of client counts widened to a geometric grid of ratio 1 + ``ratio``: k_lo down to
    the grid point at or below it (rounded up to an integer), k_hi up to the one at or above it (rounded down,
    at most n). Client counts are integers, so every count below about 1/ratio stays exact. A bound that is
    non-increasing in the block's low end and non-decreasing in its high end is still an upper bound at the
    widened block, and the distinct widened blocks are few (evaluate each once)."""
    k_lo = np.asarray(k_lo, dtype=np.float64)
    k_hi = np.asarray(k_hi, dtype=np.float64)
    step = math.log1p(ratio)
    lo = np.minimum(k_lo, np.ceil(np.exp(np.floor(np.log(np.maximum(k_lo, 1.0)) / step) * step)))
    up = np.floor(np.exp(np.ceil(np.log(np.maximum(k_hi, 1.0)) / step) * step))
    return lo, np.minimum(float(n), np.maximum(k_hi, up))


@dataclass(frozen=True)
class PerKTable:
    """A per-k RDP table eps'[k, i] (k = 0..n, orders[i]) used directly as the mixture input.

    Block bound = max over the block (exact). Intended for small n and for tests."""

    table: np.ndarray
    orders: np.ndarray
    neighbouring: str = "replace-one"

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(np.asarray(self.orders), orders)
        tab = np.asarray(self.table)[:, idx]
        out = np.empty((np.size(k_lo), np.size(orders)))
        for r, (a, b) in enumerate(
            zip(np.asarray(k_lo, dtype=np.int64), np.asarray(k_hi, dtype=np.int64), strict=True)
        ):
            out[r] = np.max(tab[a : b + 1], axis=0)
        return log_expm1((np.asarray(orders)[None, :] - 1.0) * out)


@dataclass(frozen=True)
class MixtureResult:
    """log(S - 1) of the mixture (S = sum_k w_k exp((lam-1) eps'_k)) split into exact and bounded parts."""

    orders: np.ndarray
    log_sm1: np.ndarray  # upper bound on log(sum_k P(K=k) expm1(...)) over the range, incl. guard
    log_exact: np.ndarray  # exact part (singletons)
    log_tail: np.ndarray  # block bounds
    n_exact: int
    n_blocks: int

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """Per-round RDP eps(lam) = log1p(exp(log_sm1)) / (lam - 1)."""
        result: npt.NDArray[np.float64] = np.logaddexp(0.0, self.log_sm1) / (self.orders - 1.0)
        return result


def _lse_rows(x: np.ndarray) -> npt.NDArray[np.float64]:
    if x.shape[0] == 0:
        return np.full(x.shape[1:], -np.inf)
    m = np.max(x, axis=0)
    ms = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # only where m = +inf (masked below)
        out = ms + np.log(np.sum(np.exp(x - ms[None, :]), axis=0))
    result: npt.NDArray[np.float64] = np.where(
        np.isfinite(m), out, m
    )  # +inf (an infinite moment) stays +inf, never -inf
    return result


def _add_log(log_w: np.ndarray, log_v: np.ndarray) -> np.ndarray:
    """log(w·v) with w = 0 (log −inf) times an infinite v counted as 0: a k of probability 0 adds nothing."""
    with np.errstate(invalid="ignore"):
        out = log_w + log_v
    return np.where(np.isneginf(log_w), -np.inf, out)


def _geometric_blocks(lo: int, hi: int, toward_hi: bool) -> list[tuple[int, int]]:
    """Cover [lo, hi] by blocks whose sizes 1, 2, 4, ... grow away from the core (at hi if toward_hi)."""
    blocks = []
    size = 1
    if toward_hi:
        b = hi
        while b >= lo:
            a = max(lo, b - size + 1)
            blocks.append((a, b))
            b = a - 1
            size *= 2
    else:
        a = lo
        while a <= hi:
            b = min(hi, a + size - 1)
            blocks.append((a, b))
            a = b + 1
            size *= 2
    return blocks


def checkin_mixture(
    provider: PerKProvider,
    n: int,
    gamma: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    k_range: tuple[int, int] | None = None,
    core_sd: float = 6.0,
    tol: float = 1e-11,
    max_exact: int = 4096,
) -> MixtureResult:
    """Upper bound on log sum_{k in k_range} P(K=k) expm1((lam-1) eps'_k(lam)), K ~ Bin(n, gamma).

    Exact on the core [n gamma - core_sd sd, n gamma + core_sd sd] (or the whole range if it has at most
    ``max_exact`` points); elsewhere geometric blocks bounded by ``log_binom_tail_ub`` x the provider's
    block bound, refined by halving until every block bound is below tol/(#blocks) of the running total at
    every order. Always >= the exact sum (up to the 1e-12 relative rounding guard, which only adds).
    """
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma)
    orders = np.asarray(orders, dtype=np.int64)
    if orders.ndim != 1 or orders.size == 0 or np.any(orders < 2):
        raise ParameterError("Argument 'orders' must be a non-empty 1-D array of integers >= 2.")
    lo, hi = (0, n) if k_range is None else (int(k_range[0]), int(k_range[1]))
    if not 0 <= lo <= hi <= n:
        raise ParameterError(f"Argument 'k_range' must satisfy 0 <= lo <= hi <= n={n}, not {k_range}.")
    lo1 = max(lo, 1)  # k = 0 contributes expm1(0) = 0
    empty = np.full(orders.shape, -np.inf)
    if gamma == 0.0 or lo1 > hi:
        return MixtureResult(orders, empty, empty, empty, 0, 0)
    if hi - lo1 + 1 <= max_exact:
        c_lo, c_hi = lo1, hi
    else:
        mu = n * gamma
        sd = math.sqrt(n * gamma * (1.0 - gamma))
        half = max(core_sd * sd, 0.5 * max_exact if sd < 1 else 0.0)
        c_lo = int(max(lo1, math.floor(mu - half)))
        c_hi = int(min(hi, math.ceil(mu + half)))
        if c_lo > c_hi:  # core outside range: start from the nearest end
            c_lo = c_hi = lo1 if mu < lo1 else hi
    if c_hi - c_lo + 1 > MAX_EXACT_CORE:
        raise ParameterError(
            f"Arguments 'n' = {n} and 'gamma' = {gamma!r} put {c_hi - c_lo + 1} client counts in the exact core of "
            f"the check-in mixture ({core_sd:g} standard deviations of Bin(n, gamma) each side); supported up to "
            f"{MAX_EXACT_CORE} (n * gamma * (1 - gamma) up to about {(MAX_EXACT_CORE / (2 * core_sd)) ** 2:.3g}). "
            "To fix, use a smaller n or gamma."
        )
    ks = np.arange(c_lo, c_hi + 1, dtype=np.float64)
    exact = _add_log(log_binom_pmf(n, ks, gamma)[:, None], provider.log_expm1_upper(ks, ks, orders))
    log_exact = _lse_rows(exact)
    blocks = _geometric_blocks(lo1, c_lo - 1, toward_hi=True) + _geometric_blocks(c_hi + 1, hi, toward_hi=False)
    done_vals: list[np.ndarray] = []  # final block rows
    pending = blocks
    pending_vals = None
    n_blocks_total = 0
    for _ in range(200):
        if not pending:
            break
        a = np.array([p[0] for p in pending], dtype=np.float64)
        b = np.array([p[1] for p in pending], dtype=np.float64)
        vals = _add_log(log_binom_tail_ub(n, a, b, gamma)[:, None], provider.log_expm1_upper(a, b, orders))
        pending_vals = vals
        kept = [v for v in done_vals]
        total = _lse_rows(np.concatenate([log_exact[None, :]] + [v for v in kept] + [vals], axis=0))
        thresh = total + math.log(tol / 64.0)
        with np.errstate(invalid="ignore"):
            big = np.any(vals > thresh[None, :], axis=1) & (b > a)
        if not np.any(big):
            done_vals.append(vals)
            pending = []
            break
        done_vals.append(vals[~big])
        nxt = []
        for (pa, pb), flag in zip(pending, big, strict=True):
            if flag:
                mid = (pa + pb) // 2
                nxt.append((pa, mid))
                nxt.append((mid + 1, pb))
        pending = nxt
    else:  # pragma: no cover - refinement always ends (blocks halve); guard keeps the bound valid anyway
        if pending_vals is not None:
            done_vals.append(pending_vals)
    # Singletons among the blocks are exact; report them in the tail part (they are still block rows).
    tail_rows = np.concatenate(done_vals, axis=0) if done_vals else np.empty((0, orders.size))
    n_blocks_total = tail_rows.shape[0]
    log_tail = _lse_rows(tail_rows)
    total = np.logaddexp(log_exact, log_tail) + math.log1p(_ROUNDING_GUARD)
    return MixtureResult(orders, total, log_exact, log_tail, int(ks.size), int(n_blocks_total))


def checkin_rdp(
    provider: PerKProvider,
    n: int,
    gamma: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    **kwargs: Any,  # forwarded to checkin_mixture's keyword-only options
) -> np.ndarray:
    """Per-round RDP upper bound of the check-in mixture at each order (see :func:`checkin_mixture`)."""
    return checkin_mixture(provider, n, gamma, orders, **kwargs).rdp


def rdp_to_epsilon(*args: Any, orders: Any = None, rdp: Any = None, delta: float | None = None) -> tuple[float, int]:
    """(eps, best integer order) from RDP by the core conversion :func:`~secagg_dp.accounting.core.conversion.rdp_to_dp`
    (CKS20 Prop. 12 = LHT22 Lemma 3), returning the order as an int. Warns :class:`LargestOrderWarning` when the
    optimum is the largest order.

    Keyword-only (``orders=``, ``rdp=``, ``delta=``, the names of ``rdp_to_dp(orders, rdp, delta)``): the two
    arrays are easy to swap. The old positional order ``rdp_to_epsilon(rdp, orders, delta)`` still works but
    warns (:class:`DeprecationWarning`).
    """
    if args:
        if len(args) != 3 or orders is not None or rdp is not None or delta is not None:
            raise ParameterError(
                "rdp_to_epsilon takes keyword arguments orders=, rdp=, delta= (or, deprecated, the three "
                f"positional arguments rdp, orders, delta), not {len(args)} positional argument(s)."
            )
        warnings.warn(
            "rdp_to_epsilon(rdp, orders, delta) is deprecated: call rdp_to_epsilon(orders=..., rdp=..., delta=...) "
            "(the order of rdp_to_dp(orders, rdp, delta)).",
            DeprecationWarning,
            stacklevel=2,
        )
        rdp, orders, delta = args
    if orders is None or rdp is None or delta is None:
        raise ParameterError("rdp_to_epsilon needs all of orders=, rdp= and delta=.")
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True)
    eps, order = rdp_to_dp(orders, rdp, delta)
    return eps, int(order)


OBSERVERS = _CORE_OBSERVERS  # the core's: one definition of who can observe


class CheckinCertificate(DetailCertificate):
    """A :class:`~secagg_dp.accounting.core.accountant.Certificate` of T rounds of distributed check-in (the
    RDP mixture or the window certificate; an upper bound) for ``observer``.

    ``observer="analyst"``: sees K and the aggregate (the released model); ``"server"``: the secure-aggregation
    server, which also sees who took part and who dropped; ``"coalition"``: that server colluding with
    ``colluders`` clients, sums of at least ``min_sum`` clients (:mod:`~secagg_dp.accounting.checkin.coalition`).
    ``certificate`` is False for labelled comparisons that are not upper bounds (``bound="estimate"``);
    ``ex_post`` marks a bound conditioned on the target's participation.

    The one certificate record with the check-in fields kept as before: the constructor takes them in their
    old order (``epsilon, delta, order, method, neighbouring, rounds, rdp, window, delta_rdp, delta_window``,
    then ``observer, certificate, ex_post, colluders, min_sum``) and stores them in ``detail``, read back as
    attributes; ``order`` stays an int; ``as_dict()`` is the ``"checkin"`` layout;
    :func:`dataclasses.replace` works. Equality compares ``detail`` as well.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        order: float | None,
        method: str,
        neighbouring: str,
        rounds: Any = _UNSET,
        rdp: Any = _UNSET,
        window: Any = _UNSET,
        delta_rdp: Any = _UNSET,
        delta_window: Any = _UNSET,
        observer: str = "analyst",
        certificate: bool = True,
        ex_post: Any = _UNSET,
        colluders: Any = _UNSET,
        min_sum: Any = _UNSET,
        *,
        citation: str = "",
        slack: float = 0.0,
        bound: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        ex_post = bool(_field_or_detail("ex_post", ex_post, detail, False))
        if observer not in OBSERVERS:
            raise ParameterError(f"Argument 'observer' must be one of {OBSERVERS}, not {observer!r}.")
        coalition = coalition_detail(observer, colluders, min_sum, detail)
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            observer=observer,
            neighbouring=neighbouring,
            method=method,
            certificate=certificate,
            citation=citation or (_EX_POST_CITATION if ex_post else _CITATION),
            slack=slack,
            bound=bound or ("upper" if certificate else "estimate"),
            order=order,
            detail={
                "ex_post": ex_post,
                "rounds": _field_or_detail("rounds", rounds, detail),
                "window": _field_or_detail("window", window, detail, None),
                "delta_rdp": _field_or_detail("delta_rdp", delta_rdp, detail, None),
                "delta_window": _field_or_detail("delta_window", delta_window, detail, None),
                "rdp": _field_or_detail("rdp", rdp, detail),
                **coalition,
            },
        )
        if order is not None and float(order).is_integer():  # the integer Rényi order, as before
            object.__setattr__(self, "order", int(order))

    rdp = DetailField[dict[int, float]](as_is, "The composed RDP of the certified mechanism per order.")
    window = DetailField[tuple[int, int] | None](
        lambda w: None if w is None else int_pair(w),
        "The client-count window [k_lo, k_hi] of the window certificate (None for the full mixture).",
    )
    delta_rdp = DetailField[float | None](as_is, "The part of delta spent by the RDP conversion.")
    delta_window = DetailField[float | None](as_is, "The part of delta spent on client counts outside the window.")
    ex_post = DetailField(
        bool, "True for a bound conditioned on the target's participation (not the ex-ante guarantee)."
    )

    def as_dict(self, *, schema: str = "checkin") -> dict[str, Any]:
        """JSON-ready record: ``Certificate.as_dict`` in the ``"checkin"`` layout by default (the keys
        ``secagg-dp account checkin --json`` has always printed)."""
        return super().as_dict(schema=schema)


_CITATION = (
    "check-in mixture RDP: SCI22 Thm 1 / Eq. 5, Liew, Hasegawa & Takahashi 2022, Thm 2 and 4; composition: "
    "Mironov 2017, Prop. 1; RDP -> (epsilon, delta): Canonne, Kamath & Steinke 2020, Prop. 12"
)
_EX_POST_CITATION = (
    "server ex-post view (participation revealed, the target in every round: K = 1 + K', K' ~ Bin(n - 1, gamma)), "
    "docs/accounting/observers.md; composition: Mironov 2017, Prop. 1; RDP -> (epsilon, delta): Canonne, Kamath & "
    "Steinke 2020, Prop. 12"
)


def checkin_epsilon(
    provider: PerKProvider,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    method: str = "rdp",
    delta_split: str = "conditioning",
) -> CheckinCertificate:
    """Certify T = ``rounds`` rounds: ``method="rdp"`` (full mixture, seed style) or ``"window"``
    (``delta_split`` as in :func:`window_certificate`)."""
    rounds = check_int("rounds", rounds, lo=1)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    orders = np.asarray(orders, dtype=np.int64)
    if method == "window":
        return window_certificate(provider, n, gamma, rounds, delta, orders, delta_split=delta_split)
    if method != "rdp":
        raise ParameterError(f"Argument 'method' must be 'rdp' or 'window', not {method!r}.")
    total = rounds * checkin_rdp(provider, n, gamma, orders)
    eps, order = rdp_to_epsilon(orders=orders, rdp=total, delta=delta)
    return CheckinCertificate(
        eps,
        delta,
        order,
        "rdp",
        provider.neighbouring,
        rounds,
        {int(o): float(v) for o, v in zip(orders, total, strict=True)},
        None,
        delta,
        0.0,
    )


def _edge(n: int, gamma: float, target_log: float, lower: bool) -> int:
    """Largest k_lo with P(K < k_lo) <= e^target (lower) / smallest k_hi with P(K > k_hi) <= e^target."""
    return binom_window_edge(n, gamma, target_log, lower)


def _p_out_ub(n: int, gamma: float, k_lo: int, k_hi: int) -> float:
    p = 0.0
    if k_lo > 0:
        p += math.exp(log_binom_tail_ub(n, np.array([0.0]), np.array([k_lo - 1.0]), gamma)[0])
    if k_hi < n:
        p += math.exp(log_binom_tail_ub(n, np.array([k_hi + 1.0]), np.array([float(n)]), gamma)[0])
    return p


def _window_mixture(
    provider: PerKProvider, n: int, gamma: float, orders: np.ndarray, k_range: tuple[int, int]
) -> MixtureResult:
    """:func:`checkin_mixture` on ``k_range``, cached for hashable (frozen) providers: the round's conditioned
    mixture does not depend on the number of rounds, so certifying round after round reuses it."""
    try:
        return _cached_window_mixture(provider, n, gamma, tuple(int(o) for o in orders), k_range)  # type: ignore[arg-type]  # frozen providers hash; others raise TypeError, below
    except TypeError:  # an unhashable provider (e.g. a PerKTable of arrays): no cache
        return checkin_mixture(provider, n, gamma, orders, k_range=k_range)


@functools.lru_cache(maxsize=64)
def _cached_window_mixture(
    provider: PerKProvider, n: int, gamma: float, orders: tuple[int, ...], k_range: tuple[int, int]
) -> MixtureResult:
    return checkin_mixture(provider, n, gamma, np.asarray(orders, dtype=np.int64), k_range=k_range)


def window_certificate(
    provider: PerKProvider,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    fractions: tuple[float, ...] = (1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.2, 0.5),
    window: tuple[int, int] | None = None,
    delta_split: str = "conditioning",
) -> CheckinCertificate:
    """Window certificate: RDP of the mixture conditioned on K in [k_lo, k_hi] plus a delta term for the
    excluded mass (proof: README.md, "Window certificate"; replace-one):

    - ``delta_split="conditioning"`` (default): delta_window = T P(K not in W). Conditioning on the
      data-independent event that every K_t lies in W costs only P(some K_t outside W).
    - ``delta_split="coupling"``: delta_window = (1 + e^eps) T P(K not in W), a total-variation
      coupling bound (valid, looser; kept for comparison).

    The window is chosen among those whose out-of-window mass uses a fraction f of delta (per side f/2)
    for f in ``fractions``, unless ``window`` is given; the smallest epsilon wins. P(K not in W) is a
    rigorous upper bound and P(W) in the conditioning is bounded below by 1 - that bound.
    """
    if delta_split not in ("conditioning", "coupling"):
        raise ParameterError(f"Argument 'delta_split' must be 'conditioning' or 'coupling', not {delta_split!r}.")

    def split_factor(eps: float) -> float:
        return 1.0 if delta_split == "conditioning" else 1.0 + math.exp(min(eps, 700.0))

    rounds = check_int("rounds", rounds, lo=1)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    orders = np.asarray(orders, dtype=np.int64)
    candidates = []
    if window is not None:
        candidates.append((int(window[0]), int(window[1])))
    else:
        for f in fractions:
            tl = math.log(f * delta / (2.0 * rounds))
            candidates.append((_edge(n, gamma, tl, True), _edge(n, gamma, tl, False)))
    best: CheckinCertificate | None = None
    for k_lo, k_hi in dict.fromkeys(candidates):
        p_out = _p_out_ub(n, gamma, k_lo, k_hi)
        if rounds * p_out >= delta or p_out >= 1.0:
            continue
        mix = _window_mixture(provider, n, gamma, orders, (k_lo, k_hi))
        log_sm1 = mix.log_sm1 - math.log1p(-p_out)
        total = rounds * np.logaddexp(0.0, log_sm1) / (orders - 1.0)
        tp = rounds * p_out

        def conv(eps_prev: float, tp: float = tp, total: np.ndarray = total) -> tuple[float, int, float]:
            d_rdp = delta - split_factor(eps_prev) * tp
            if d_rdp <= 0:
                return math.inf, int(orders[0]), d_rdp
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                e, o = rdp_to_epsilon(orders=orders, rdp=total, delta=d_rdp)
            return e, o, d_rdp

        eps, order, d_rdp = conv(0.0)
        for _ in range(100):  # increasing fixed-point iteration eps <- g(eps)
            e2, o2, d2 = conv(eps)
            if not math.isfinite(e2):
                eps = math.inf
                break
            if e2 <= eps * (1 + 1e-14) + 1e-15:
                eps, order, d_rdp = max(eps, e2), o2, d2
                break
            eps, order, d_rdp = e2, o2, d2
        if not math.isfinite(eps):
            continue
        # final check: conversion at delta_rdp(eps) gives <= eps
        d_rdp = delta - split_factor(eps) * tp
        if d_rdp <= 0:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e_chk, order = rdp_to_epsilon(orders=orders, rdp=total, delta=d_rdp)
        if e_chk > eps:
            continue
        cert = CheckinCertificate(
            eps,
            delta,
            order,
            "window",
            provider.neighbouring,
            rounds,
            {int(o): float(v) for o, v in zip(orders, total, strict=True)},
            (k_lo, k_hi),
            d_rdp,
            delta - d_rdp,
        )
        if best is None or cert.epsilon < best.epsilon:
            best = cert
    if best is None:
        raise ParameterError(
            "No check-in window satisfies T * P(K outside window) < delta; increase 'delta' or reduce 'rounds'."
        )
    if best.order == int(orders.max()):
        warnings.warn(
            f"The optimal Rényi order {best.order} is the largest offered; larger orders may give a smaller ε.",
            LargestOrderWarning,
            stacklevel=2,
        )
    return best
