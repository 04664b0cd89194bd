"""Baselines for distributed check-in (for comparison only; labelled, never the headline certificate).

* :func:`strong_composition_baseline` -- SCI22 Sec. 5.1: with high probability l1 <= K <= l2; then one
  round is at worst a Gaussian with noise std sqrt(l1) sigma (sensitivity 2, replace-one) subsampled
  without replacement at rate l2/n: per-round (eps0, delta0) from the analytic Gaussian (Balle & Wang
  2018, Thm 8) and the amplification eps0 = log(1 + q(e^eps - 1)), delta0 = q delta (Balle, Barthe &
  Gaboardi 2018, substitution / without replacement); T rounds by the advanced composition theorem
  (Dwork, Rothblum & Vadhan 2010) or basic composition, whichever is smaller. delta = T(delta1 + delta2)
  + T delta0 + delta' (the seed adds delta1 + delta2 once; we union-bound over the T rounds -- deviation on
  purpose, the seed's count is per round).
* :func:`chernoff_shortcut_rdp` -- SCI22 Eq. 11 / LT22 Thm 3: 1/(lam-1) log(exp((lam-1) eps_1 -
  D^2 n gamma/2) + exp((lam-1) eps_{(1-D) n gamma + 1})), minimised over D. It assumes eps'_k is
  non-increasing in k, which holds for the draft's fixed rate gamma (used here, as in the seed) but NOT for
  rate k/n (eps'_k grows with k in the bulk), so this is a comparison, not a certificate.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.bases import GaussianSum
from secagg_dp.accounting.checkin.mixture import (
    DEFAULT_ORDERS,
    BaseMechanism,
    SubsampledCheckin,
    _edge,
    rdp_to_epsilon,
)

__all__ = [
    "analytic_gaussian_epsilon",
    "strong_composition_baseline",
    "chernoff_shortcut_rdp",
    "chernoff_shortcut_epsilon",
]


def _ag_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with mu = sensitivity/std (Balle & Wang 2018, Thm 8)."""
    return float(ndtr(mu / 2.0 - eps / mu) - math.exp(eps) * ndtr(-mu / 2.0 - eps / mu))


def analytic_gaussian_epsilon(sensitivity: float, std: float, delta: float) -> float:
    """Smallest eps with delta(eps) <= delta for the Gaussian mechanism (bisection; delta(eps) decreasing)."""
    mu = sensitivity / std
    if _ag_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _ag_delta(hi, mu) > delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _ag_delta(mid, mu) > delta else (lo, mid)
    return hi


def strong_composition_baseline(n: int, gamma: float, sigma: float, rounds: int, delta: float) -> dict[str, Any]:
    """SCI22 Sec. 5.1 baseline (replace-one, C = 1, per-client std sigma). Returns eps and the split."""
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    rounds = check_int("rounds", rounds, lo=1)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    best: dict[str, Any] = {"epsilon": math.inf}
    for f_tail in (0.05, 0.2, 0.4):
        tl = math.log(f_tail * delta / (2.0 * rounds))
        l1 = max(_edge(n, gamma, tl, True), 1)
        l2 = _edge(n, gamma, tl, False)
        q = l2 / n
        for f_prime in (0.1, 0.3, 0.5):
            d_prime = f_prime * delta
            d0 = (1.0 - f_tail - f_prime) * delta / rounds
            if d0 <= 0:
                continue
            eps_b = analytic_gaussian_epsilon(2.0, math.sqrt(l1) * sigma, d0 / q)
            e0 = math.log1p(q * math.expm1(eps_b))
            adv = math.sqrt(2.0 * rounds * math.log(1.0 / d_prime)) * e0 + rounds * e0 * math.expm1(e0)
            eps = min(adv, rounds * e0)
            if eps < best["epsilon"]:
                best = {
                    "epsilon": eps,
                    "delta": delta,
                    "l1": l1,
                    "l2": l2,
                    "eps0": e0,
                    "method": "baseline: high-probability + strong composition (SCI22 Sec. 5.1)",
                    "neighbouring": "replace-one",
                }
    return best


def chernoff_shortcut_rdp(
    mechanism: BaseMechanism,
    n: int,
    gamma: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    deltas: np.ndarray | None = None,
) -> npt.NDArray[np.float64]:
    """SCI22 Eq. 11 / LT22 Thm 3 with the draft's rate gamma, minimised over D in ``deltas``."""
    orders = np.asarray(orders, dtype=np.int64)
    deltas = np.linspace(0.01, 0.99, 99) if deltas is None else np.asarray(deltas)
    prov = SubsampledCheckin(mechanism, n, rate="gamma", gamma=gamma)
    mu = n * gamma
    kstar = np.floor((1.0 - deltas) * mu).astype(np.int64)
    dd = 1.0 - kstar / mu  # effective D >= requested
    ks = np.concatenate([[1], kstar + 1]).astype(np.float64)
    ks = np.minimum(ks, n)
    lem = prov.log_expm1_upper(ks, ks, orders)
    a1 = orders[None, :] - 1.0
    x = np.logaddexp(0.0, lem)  # (lam-1) eps'_k
    first = x[0][None, :] - (dd**2 * mu / 2.0)[:, None]
    second = x[1:]
    val = np.logaddexp(first, second) / a1
    result: npt.NDArray[np.float64] = np.min(val, axis=0)
    return result


def chernoff_shortcut_epsilon(
    n: int, gamma: float, sigma: float, rounds: int, delta: float, orders: np.ndarray = DEFAULT_ORDERS
) -> dict[str, Any]:
    """(eps, order) of the Chernoff shortcut for the distributed Gaussian; labelled baseline (rate gamma)."""
    r = rounds * chernoff_shortcut_rdp(GaussianSum(sigma), n, gamma, orders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps, order = rdp_to_epsilon(orders=orders, rdp=r, delta=delta)
    return {
        "epsilon": eps,
        "order": order,
        "delta": delta,
        "neighbouring": "replace-one",
        "method": "baseline: Chernoff shortcut (SCI22 Eq. 11 / LT22 Thm 3), draft rate gamma",
    }
