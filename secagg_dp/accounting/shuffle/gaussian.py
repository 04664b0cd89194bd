"""Shuffle Gaussian Rényi divergence: a LOWER bound on the RDP of shuffled local Gaussian reports.

Each of ``n`` users adds N(0, σ²) to a value of L2 sensitivity 1 and a trusted shuffler permutes the ``n``
reports uniformly. For the single pair D = (0, …, 0), D' = (1, 0, …, 0) (replace-one neighbours) the Rényi
divergence of integer order λ ≥ 2 is (LT22 Thm 1 = LHT22 Thm 3, Eq. 6)

    D_λ = 1/(λ−1) · log( e^{−λ/(2σ²)} / n^λ · Σ_{k_1+…+k_n=λ} multinomial(λ; k) · e^{Σ k_i²/(2σ²)} ).

**This is a lower bound on the mechanism's RDP, never a certificate**: RDP is a supremum over all
neighbouring pairs and LHT22 (Thm 3, Remark 4) proves the formula for this one pair only. Its own upper
bound λ/(2σ²) (LT22 Corollary 1) is the RDP of the Gaussian without shuffling, a valid certificate.

Fast exact evaluation (ours). With c = 1/(2σ²) and w_k = e^{c·k(k−1)}, the sum equals
λ!·[x^λ] f(x)^n for f(x) = Σ_k e^{ck²} x^k / k!. Factoring e^{ck} out of each coefficient removes the
e^{−λc} prefactor exactly: with h(y) = Σ_k w_k y^k / k! and B_m = m!/n^m · [y^m] h(y)^n we have
D_m = log(B_m)/(m − 1), and B_m ≡ 1 when c = 0. We carry the excess E_m = B_m − 1 ≥ 0 in log space:

* n ≥ L (L the largest order): J.C.P. Miller's recurrence for a power of a power series,
  E_m = Σ_{k=1}^{m} C_{m,k} [(w_k − 1) + w_k E_{m−k}], C_{m,k} = ((n+1)k − m)·binom(m, k)/(m·n^k),
  where Σ_k C_{m,k} = 1 and every term is non-negative, so there is no cancellation. O(L²) for all orders
  2..L at once.
* n < L: the coefficients (n+1)k − m change sign, so we use binary powering of the truncated series
  instead; the product of h^a and h^b has excess Σ_i W_{m,i}(B_i B'_{m−i} − 1) with binomial weights W,
  again a sum of non-negative terms, each log(B_i B'_{m−i} − 1) = log_expm1(log B_i + log B'_{m−i}).
  O(L² log n), one vectorised pass over the triangle i ≤ m ≤ L per product.

Carrying the excess (rather than B_m) keeps full relative precision of D_m even when D_m ~ 1e−12
(n ~ 10^9), where log B_m − mc would cancel catastrophically.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.logspace import log1p_exp, log_expm1
from secagg_dp.errors import ParameterError

__all__ = [
    "NEIGHBOURING",
    "shuffle_gaussian_rdp",
    "shuffle_gaussian_rdp_partition",
    "shuffle_gaussian_rdp_upper",
    "shuffle_gaussian_log_moments",
]

NEIGHBOURING = "replace-one"

#: Largest order accepted by the fast method (memory is O(L²) only for n < L).
MAX_ORDER = 1 << 14


def _check_orders(orders: int | Iterable[int]) -> np.ndarray:
    if isinstance(orders, bool):
        raise TypeError("Argument 'orders' must be an integer or a sequence of integers, not bool.")
    arr = np.atleast_1d(np.asarray(orders))
    if arr.size == 0:
        raise ParameterError("Argument 'orders' must contain at least one order, not an empty sequence.")
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ParameterError(
            f"Argument 'orders' must be integers >= 2 (the formula is for integer orders), not {orders!r}."
        )
    if np.any(arr < 2) or np.any(arr > MAX_ORDER):
        raise ParameterError(
            f"Argument 'orders' must be integers in [2, {MAX_ORDER}], not {arr[(arr < 2) | (arr > MAX_ORDER)][:3]}."
        )
    return arr.astype(np.int64)


def _log_factorials(L: int) -> tuple[np.ndarray, np.ndarray]:
    """log(m!) for m = 0..L as float64 pairs (hi, lo) with hi on a 2^−30 grid.

    Differences of float64 log-gammas near 6000 lose ~1e−12 relative in the binomial weights. With hi on
    a 2^−30 grid (≤ 43 significant bits for m ≤ 16384), hi[m] − hi[k] − hi[m−k] is exact in float64, and
    the small lo parts (from an extended-precision table) restore log C(m, k) to ~1e−16 relative.
    """
    ld = np.longdouble
    full = np.zeros(L + 1, dtype=ld)
    if L >= 1:
        full[1:] = np.cumsum(np.log(np.arange(1, L + 1, dtype=ld)))
    scale = ld(2.0**30)
    hi_ld = np.round(full * scale) / scale
    return hi_ld.astype(np.float64), (full - hi_ld).astype(np.float64)


def _log_binom_matrix(L: int) -> npt.NDArray[np.float64]:
    """log C(m, i) for 0 ≤ i ≤ m ≤ L (row m, column i), −inf above the diagonal."""
    hi, lo = _log_factorials(L)
    m = np.arange(L + 1)[:, None]
    i = np.arange(L + 1)[None, :]
    j = np.clip(m - i, 0, L)
    out: npt.NDArray[np.float64] = (hi[m] - hi[i] - hi[j]) + (lo[m] - lo[i] - lo[j])
    out[i > m] = -np.inf
    return out


def _log_excess_recurrence(L: int, n: int, c: float) -> np.ndarray:
    """log E_m for m = 0..L by Miller's recurrence; requires n ≥ L so that all terms are non-negative."""
    kk = np.arange(L + 1, dtype=np.float64)
    lb = _log_binom_matrix(L)
    with np.errstate(over="ignore"):
        log_w = c * kk * (kk - 1.0)
    log_wm1 = log_expm1(log_w)
    # log C_{m,k} for all 1 ≤ k ≤ m ≤ L at once (row m, column k); −inf above the diagonal.
    m_col = kk[:, None]
    k_row = kk[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_c = np.log(np.maximum((n + 1.0) * k_row - m_col, 0.0)) - np.log(m_col) + lb - k_row * math.log(n)
    log_c[(k_row > m_col) | (k_row < 1) | (m_col < 1)] = -np.inf
    le = np.full(L + 1, -np.inf)
    for m in range(2, L + 1):  # E_0 = E_1 = 0
        prev = le[m - 1 :: -1][:m]
        with np.errstate(invalid="ignore"):  # w = +inf times E = 0 is 0, not NaN
            wprev = np.where(np.isneginf(prev), -np.inf, log_w[1 : m + 1] + prev)
        t = log_c[m, 1 : m + 1] + np.logaddexp(log_wm1[1 : m + 1], wprev)
        top = t.max()
        # every term -inf: c·k(k−1) underflowed to 0 (σ > ~1e150), E_m = 0 to double precision
        le[m] = top + math.log(np.exp(t - top).sum()) if np.isfinite(top) else top
    return le


@functools.lru_cache(maxsize=4)
def _triangle(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattened lower triangle 0 ≤ i ≤ m ≤ L (row-major: each m contiguous), log C(m, i), row starts."""
    m, i = np.tril_indices(L + 1)
    lbin = _log_binom_matrix(L)[m, i]
    starts = (np.arange(L + 1) * (np.arange(L + 1) + 1)) // 2
    for arr in (m, i, lbin, starts):
        arr.setflags(write=False)
    return m, i, m - i, lbin, starts


def _log_excess_product(lb_a: np.ndarray, a: int, lb_b: np.ndarray, b: int, L: int) -> np.ndarray:
    """Log excess of h^(a+b) from log B of h^a and h^b (all terms non-negative), O(L²) in one pass.

    E_m = Σ_i W_{m,i}(B_i B'_{m−i} − 1), W_{m,i} = C(m,i)(a/(a+b))^i (b/(a+b))^{m−i}, and each
    log(B_i B'_{m−i} − 1) = log_expm1(log B_i + log B'_{m−i}) keeps full relative precision.
    """
    m, i, j, lbin, starts = _triangle(L)
    t = lbin + i * math.log(a / (a + b)) + j * math.log(b / (a + b)) + log_expm1(lb_a[i] + lb_b[j])
    top = np.maximum.reduceat(t, starts)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = safe + np.log(np.add.reduceat(np.exp(t - safe[m]), starts))
    return np.where(np.isfinite(top), out, -np.inf)


def _log_excess_powering(L: int, n: int, c: float) -> np.ndarray:
    """log E_m for m = 0..L by binary powering of the truncated series (any n ≥ 1).

    ~log2(n) squarings and popcount(n) − 1 products, each one vectorised O(L²) pass; h^p is carried as
    log B (= log1p of its excess) between products."""
    mm = np.arange(L + 1, dtype=np.float64)
    base_lb = c * mm * (mm - 1.0)  # h^1: log B_m = log w_m
    result: tuple[np.ndarray, int] | None = None
    power, p = base_lb, 1
    nn = n
    while True:
        if nn & 1:
            if result is None:
                result = (power, p)
            else:
                result = (log1p_exp(_log_excess_product(result[0], result[1], power, p, L)), result[1] + p)
        nn >>= 1
        if not nn:
            break
        power, p = log1p_exp(_log_excess_product(power, p, power, p, L)), 2 * p
    return log_expm1(result[0])  # type: ignore[index]  # n >= 1, so at least one bit was set


def _half_inv_square(sigma: float) -> float:
    """c = 1/(2σ²) as (1/σ)²/2: σ² underflows for σ < 1e-154; +inf only when c truly exceeds 1.8e308."""
    with np.errstate(over="ignore"):
        return float((1.0 / np.float64(sigma)) ** 2 / 2.0)


def _log_excess(L: int, n: int, sigma: float) -> np.ndarray:
    c = _half_inv_square(sigma)
    if math.isinf(c):  # no noise: the pair's outputs have different supports, every moment m ≥ 2 is +inf
        out = np.full(L + 1, np.inf)
        out[:2] = -np.inf
        return out
    if n >= L:
        return _log_excess_recurrence(L, n, c)
    return _log_excess_powering(L, n, c)


def shuffle_gaussian_log_moments(max_order: int, *, n: int, sigma: float) -> np.ndarray:
    """(m − 1)·D_m = log of the pair's λ-th moment, for m = 0..max_order (entries 0, 1 are 0).

    Same pair and same lower-bound caveat as :func:`shuffle_gaussian_rdp`. Exposed for the subsampled and
    check-in compositions, which need e^{(j−1)D_j} for every j ≤ λ.
    """
    L = check_int("max_order", max_order, lo=1, hi=MAX_ORDER)
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    return log1p_exp(_log_excess(max(L, 1), n, sigma))


def shuffle_gaussian_rdp(
    orders: int | Sequence[int] | npt.NDArray[np.int64], *, n: int, sigma: float
) -> npt.NDArray[np.float64]:
    """LOWER bound on the RDP of the shuffle Gaussian mechanism (LT22 Thm 1 = LHT22 Thm 3).

    Exact Rényi divergence of order λ for the pair D = (0,…,0), D' = (1,0,…,0) of ``n`` users, each
    adding N(0, σ²) to a sensitivity-1 value (replace-one). Integer orders λ ≥ 2, any n ≥ 1, σ > 0.
    Not a privacy certificate; see :func:`shuffle_gaussian_rdp_upper` for the certified upper bound.
    Exact to ~1e−13 relative for λ ≤ 1024 (fast series method, module docstring).
    """
    arr = _check_orders(orders)
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    L = int(arr.max())
    log_mom = log1p_exp(_log_excess(L, n, sigma))
    result: npt.NDArray[np.float64] = log_mom[arr] / (arr - 1.0)
    return result


def shuffle_gaussian_rdp_upper(orders: int | Sequence[int] | npt.NDArray[np.int64], *, sigma: float) -> np.ndarray:
    """λ/(2σ²): LT22 Corollary 1, the Gaussian RDP without shuffling (Mironov 2017). An upper bound."""
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
        raise ParameterError(f"Argument 'orders' must be finite orders > 1, not {orders!r}.")
    with np.errstate(over="ignore"):  # +inf only when λ/(2σ²) exceeds 1.8e308
        return arr * _half_inv_square(sigma)


def _partitions(total: int, max_parts: int, largest: int | None = None) -> Iterator[list[int]]:
    """Integer partitions of ``total`` into at most ``max_parts`` positive parts, non-increasing."""
    if largest is None:
        largest = total
    if total == 0:
        yield []
        return
    if max_parts == 0:
        return
    for first in range(min(total, largest), 0, -1):
        for rest in _partitions(total - first, max_parts - 1, first):
            yield [first, *rest]


def shuffle_gaussian_rdp_partition(order: int, *, n: int, sigma: float) -> float:
    """LT22 Algorithm 1: the same LOWER bound summed over integer partitions of λ (small λ only).

    Each partition ρ = (k_1 ≥ … ≥ k_l > 0), l ≤ n, stands for n!/(κ_0!·κ_1!·…) ordered tuples, where κ_0 =
    n − l counts the zero parts and κ_j the repeated non-zero values (LT22 App. B.1). The number of
    partitions grows like e^{π√(2λ/3)}, so this is a reference for λ ≲ 60; it also loses precision for
    large n because the log-gamma terms cancel (why the fast method exists).
    """
    lam = check_int("order", order, lo=2, hi=80)
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    c = _half_inv_square(sigma)
    if math.isinf(c):
        return math.inf
    lg = math.lgamma
    logs = []
    for parts in _partitions(lam, min(lam, n)):
        kappa: dict[int, int] = {}
        for k in parts:
            kappa[k] = kappa.get(k, 0) + 1
        kappa_0 = n - len(parts)
        log_term = (
            lg(lam + 1)
            - sum(lg(k + 1) for k in parts)
            + lg(n + 1)
            - lg(kappa_0 + 1)
            - sum(lg(v + 1) for v in kappa.values())
            + c * sum(k * k for k in parts)
        )
        logs.append(log_term)
    log_sum = float(logsumexp(np.asarray(logs)))
    return (log_sum - lam * c - lam * math.log(n)) / (lam - 1)
