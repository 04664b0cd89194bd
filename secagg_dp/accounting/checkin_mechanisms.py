"""k-client base mechanisms of the distributed check-in accountant.

Each class describes the mechanism run when exactly k clients take part in a round and gives, for a block
of client counts [k_lo, k_hi], an **upper bound** on max_{k in block} eps_k(j) at integer orders j
(exact when k_lo == k_hi). The bounds are monotone in the block ends, which is what the block-wise tail
bounds of :mod:`secagg_dp.accounting.checkin` need.

Neighbouring relation of every class here: ``replace-one`` at the client level (one client's clipped
vector is replaced; L2 sensitivity of the sum 2C).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from secagg_dp._validate import check_int, check_real

__all__ = ["GaussianSum", "SkellamSum", "DDGSum", "ddg_tau_upper"]


@dataclass(frozen=True)
class GaussianSum:
    """Sum of k clients' vectors (L2 norm <= clip) each with N(0, (sigma*clip)^2 I) noise; replace-one.

    Total noise variance k sigma^2 C^2, sensitivity 2C, so eps_k(a) = a (2C)^2 / (2 k sigma^2 C^2)
    = 2a / (k sigma^2) (Mironov 2017, Prop. 7; seed 000 Thm 4 proof). Non-increasing in k.
    """

    sigma: float
    neighbouring: str = "replace-one"

    def __post_init__(self) -> None:
        check_real("sigma", self.sigma, lo=0.0, lo_open=True)
        if self.neighbouring != "replace-one":
            raise ValueError("GaussianSum supports neighbouring='replace-one' only")

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.asarray(k_lo, dtype=np.float64)
        return 2.0 * np.asarray(orders, dtype=np.float64)[None, :] / (k[:, None] * self.sigma**2)


@dataclass(frozen=True)
class SkellamSum:
    """Sum of k clients' integer vectors each with Skellam noise of variance ``variance`` per coordinate.

    Infinitely divisible: total variance mu = k v exactly. Bound (Agarwal, Kairouz & Liu 2021, Thm 3.5 as
    restated in issue 4): eps(a) = a D2^2/(2 mu) + min{((2a-1) D2^2 + 6 D1)/(4 mu^2), 3 D1/(2 mu)}, with
    D2, D1 the replace-one L2 / L1 sensitivities in grid units. Non-increasing in k.
    """

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float

    def __post_init__(self) -> None:
        check_real("variance", self.variance, lo=0.0, lo_open=True)
        check_real("l2_sensitivity", self.l2_sensitivity, lo=0.0, lo_open=True)
        check_real("l1_sensitivity", self.l1_sensitivity, lo=0.0, lo_open=True)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        mu = np.asarray(k_lo, dtype=np.float64)[:, None] * self.variance
        a = np.asarray(orders, dtype=np.float64)[None, :]
        d2, d1 = self.l2_sensitivity, self.l1_sensitivity
        return a * d2**2 / (2.0 * mu) + np.minimum(((2.0 * a - 1.0) * d2**2 + 6.0 * d1) / (4.0 * mu**2), 1.5 * d1 / mu)


def ddg_tau_upper(k: np.ndarray, sigma: float) -> np.ndarray:
    """Upper bound on tau_k = 10 sum_{i=1}^{k-1} exp(-2 pi^2 sigma^2 i/(i+1)) (Kairouz, Liu & Steinke 2021).

    Exact (to rounding) for k <= 4096; beyond, the terms i >= 4096 are bounded with e^y <= 1 + y e^y,
    exp(-c(1 - 1/m)) <= e^-c (1 + (c/m) e^{c/4097}), summed in closed form. Non-decreasing in k.
    """
    k = np.asarray(k, dtype=np.float64)
    c = 2.0 * math.pi**2 * sigma**2
    m_cut = 4096
    i = np.arange(1, m_cut, dtype=np.float64)
    terms = np.exp(-c * i / (i + 1.0))
    cums = np.concatenate([[0.0], np.cumsum(terms)])  # cums[k-1] = sum_{i=1}^{k-1}
    small = k <= m_cut
    out = np.empty_like(k)
    out[small] = 10.0 * cums[np.maximum(k[small], 1).astype(np.int64) - 1]
    kb = k[~small]
    if kb.size:
        # i from m_cut to k-1, m = i + 1 from m_cut+1 to k: sum e^-c (1 + (c/m) e^{c/(m_cut+1)})
        cnt = kb - m_cut
        harm = np.log(kb / m_cut)  # sum_{m=m_cut+1}^{k} 1/m <= log(k/m_cut)
        extra = math.exp(-c) * (cnt + c * math.exp(c / (m_cut + 1)) * harm)
        out[~small] = 10.0 * (cums[-1] + extra)
    return out


@dataclass(frozen=True)
class DDGSum:
    """Sum of k clients' integer vectors (dimension d) each with discrete Gaussian N_Z(0, sigma^2) noise.

    Kairouz, Liu & Steinke (2021, Thm 1 / Cor.) with n -> k: eps(a) = min{ a D2^2/(2 k s^2) + tau d,
    (a/2)(D2^2/(k s^2) + 2 tau D1/(sqrt(k) s) + tau^2 d), (a/2)(D2/(sqrt(k) s) + tau sqrt(d))^2 },
    tau = tau_k (increasing in k). Block bound: every branch is non-increasing in k apart from tau, so the
    branches are evaluated at k = k_lo with tau = tau_{k_hi}.
    """

    sigma: float
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float

    def __post_init__(self) -> None:
        check_real("sigma", self.sigma, lo=0.0, lo_open=True)
        check_int("dim", self.dim, lo=1)
        check_real("l2_sensitivity", self.l2_sensitivity, lo=0.0, lo_open=True)
        check_real("l1_sensitivity", self.l1_sensitivity, lo=0.0, lo_open=True)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.asarray(k_lo, dtype=np.float64)[:, None]
        tau = ddg_tau_upper(np.asarray(k_hi), self.sigma)[:, None]
        a = np.asarray(orders, dtype=np.float64)[None, :]
        s, d = self.sigma, float(self.dim)
        d2, d1 = self.l2_sensitivity, self.l1_sensitivity
        b1 = a * d2**2 / (2.0 * k * s**2) + tau * d
        b2 = (a / 2.0) * (d2**2 / (k * s**2) + 2.0 * tau * d1 / (np.sqrt(k) * s) + tau**2 * d)
        b3 = (a / 2.0) * (d2 / (np.sqrt(k) * s) + tau * math.sqrt(d)) ** 2
        return np.minimum(np.minimum(b1, b2), b3)
