"""k-client base mechanisms of the distributed check-in accountant.

Each class describes the mechanism run when exactly k clients take part in a round and gives, for a block
of client counts [k_lo, k_hi], an **upper bound** on max_{k in block} eps_k(j) at integer orders j
(exact when k_lo == k_hi). The bounds are monotone in the block ends, which is what the block-wise tail
bounds of :mod:`secagg_dp.accounting.checkin.mixture` need. The formulas are the core's
(:mod:`secagg_dp.accounting.core.rdp`), evaluated for all k at once.

Neighbouring relation of every class here: ``replace-one`` at the client level (one client's clipped
vector is replaced; L2 sensitivity of the sum 2C).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.rdp import ddg_rdp, ddg_tau, gaussian_rdp, skellam_rdp

__all__ = ["GaussianSum", "SkellamSum", "DDGSum"]

_MAX_VARIANCE = 1.7e308


@dataclass(frozen=True)
class GaussianSum:
    """Sum of k clients' vectors (L2 norm <= clip) each with N(0, (sigma*clip)^2 I) noise; replace-one.

    Total noise variance k sigma^2 C^2, sensitivity 2C, so eps_k(a) = a (2C)^2 / (2 k sigma^2 C^2)
    = 2a / (k sigma^2) (Mironov 2017, Prop. 7; SCI22 Thm 4 proof). Non-increasing in k.
    """

    sigma: float
    neighbouring: str = "replace-one"

    def __post_init__(self) -> None:
        check_real("sigma", self.sigma, lo=0.0, lo_open=True)
        if self.neighbouring != "replace-one":
            raise ValueError("GaussianSum supports neighbouring='replace-one' only")

    def noise_multiplier(self, k: np.ndarray) -> np.ndarray:
        """z_k = sigma sqrt(k) C / (2C): total noise std over the replace-one sensitivity (WBK19 Thm 27's z)."""
        return self.sigma * np.sqrt(np.asarray(k, dtype=np.float64)) / 2.0

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        return gaussian_rdp(orders, self.sigma * np.sqrt(k), 2.0)


@dataclass(frozen=True)
class SkellamSum:
    """Sum of k clients' integer vectors each with Skellam noise of variance ``variance`` per coordinate.

    Infinitely divisible: total variance mu = k v exactly. Bound (Agarwal, Kairouz & Liu 2021, Thm 3.5 as
    restated by us): eps(a) = a D2^2/(2 mu) + min{((2a-1) D2^2 + 6 D1)/(4 mu^2), 3 D1/(2 mu)}, with
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
        with np.errstate(over="ignore"):  # k·v beyond 1.7e308 is clamped down: a smaller μ, a larger ε
            mu = np.minimum(np.atleast_1d(np.asarray(k_lo, dtype=np.float64)) * self.variance, _MAX_VARIANCE)
        return skellam_rdp(orders, mu, self.l2_sensitivity, self.l1_sensitivity)


@dataclass(frozen=True)
class DDGSum:
    """Sum of k clients' integer vectors (dimension d) each with discrete Gaussian N_Z(0, sigma^2) noise.

    Kairouz, Liu & Steinke (2021, Thm 1 / Cor.) with n -> k (:func:`secagg_dp.accounting.core.rdp.ddg_rdp`),
    tau = tau_k (:func:`secagg_dp.accounting.core.rdp.ddg_tau`, increasing in k). Block bound: every branch is
    non-increasing in k and non-decreasing in tau, so the branches are evaluated at k = k_lo with
    tau = tau_{k_hi}.
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
        k = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        tau = ddg_tau(np.atleast_1d(np.asarray(k_hi, dtype=np.float64)), self.sigma)
        return ddg_rdp(orders, k, self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity, tau=tau)
