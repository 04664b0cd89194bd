"""Dropouts in distributed check-in (SCI22 Sec. 3.2) and under-delivered noise.

* Check-in probability p and independent dropout probability p' at each of N stages before the masked input
  give the effective check-in rate gamma = p (1 - p')^N; N = 1 is the single-dropout model of the self
  check-in draft (Sec. 3.2), N = 3 our protocol (:data:`PROTOCOL_DROPOUT_STAGES`, the default).
* Per-stage dropout of secure aggregation: a client that drops *before its masked input is received*
  contributes neither data nor noise, exactly as if it had not checked in, so only those stages thin the
  check-in; a client dropping after its masked input arrived is still in the sum (its mask is removed by
  the survivors' shares) and changes nothing. So gamma = p * prod_{stages before input} (1 - p'_s),
  provided the dropouts are independent of the data.
* Under-delivered noise: noise calibrated for n0 clients (per-client variance sigma_total^2 / n0) when only
  n1 < n0 noise shares arrive gives total std sigma_total sqrt(n1/n0); :func:`underdelivered_epsilon`
  recomputes the certificate. Neighbouring relation: the caller's (the ratio z = std/sensitivity is all
  that matters for the Gaussian).

The seed says using p instead of gamma is conservative. With distributed noise the noise also grows with
k, so this is checked numerically by :func:`p_versus_gamma` rather than assumed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS, gaussian_rdp
from secagg_dp.errors import ParameterError
from secagg_dp.stages import PROTOCOL_DROPOUT_STAGES, ROSTER_DROPOUT_STAGES

__all__ = [
    "PROTOCOL_DROPOUT_STAGES",
    "ROSTER_DROPOUT_STAGES",
    "effective_checkin_rate",
    "DropoutStage",
    "staged_checkin_rate",
    "gaussian_composed_epsilon",
    "calibrate_gaussian_multiplier",
    "underdelivered_epsilon",
    "p_versus_gamma",
]


# PROTOCOL_DROPOUT_STAGES (3: advertise_keys, share_keys, masked_input, before the masked input is received) and
# ROSTER_DROPOUT_STAGES (1: before the roster) are defined with the stage model (secagg_dp.stages), re-exported here.


def effective_checkin_rate(p: float, dropout: float, dropout_stages: int = PROTOCOL_DROPOUT_STAGES) -> float:
    """gamma = p (1 - p')^N: check in with probability p, then survive N independent dropout chances p'
    before the masked input is received.

    N = 3 (default) is our protocol (advertise_keys, share_keys, masked_input); N = 1 is the single-dropout
    model gamma = p (1 - p') of the self check-in draft (Liew, Hasegawa & Takahashi, Sec. 3.2)."""
    p = check_probability("p", p)
    dropout = check_probability("dropout", dropout)
    dropout_stages = check_int("dropout_stages", dropout_stages, lo=1)
    return p * (1.0 - dropout) ** dropout_stages


@dataclass(frozen=True)
class DropoutStage:
    """A protocol stage with independent dropout probability ``probability``.

    ``before_input=True`` if a client dropping at this stage never has its masked input received (it then
    contributes neither data nor noise); ``False`` for stages after the masked input arrived."""

    name: str
    probability: float
    before_input: bool

    def __post_init__(self) -> None:
        check_probability("probability", self.probability)
        if not isinstance(self.before_input, bool):
            raise TypeError(f"Argument 'before_input' must be a bool, not {type(self.before_input).__name__}.")


def staged_checkin_rate(p: float, stages: Sequence[DropoutStage]) -> float:
    """gamma = p * prod over stages before the masked input of (1 - p'_s); later stages do not thin."""
    p = check_probability("p", p)
    g = p
    for s in stages:
        if not isinstance(s, DropoutStage):
            raise TypeError(f"Argument 'stages' must hold DropoutStage objects, not {type(s).__name__}.")
        if s.before_input:
            g *= 1.0 - s.probability
    return g


def gaussian_composed_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """eps of T Gaussian mechanisms with z = std / L2-sensitivity: RDP T a/(2 z^2) (Mironov 2017),
    converted with CKS20 over the core's DEFAULT_ORDERS (the core's gaussian_rdp and rdp_to_dp)."""
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0, lo_open=True)
    rounds = check_int("rounds", rounds, lo=1)
    return rdp_to_dp(DEFAULT_ORDERS, rounds * gaussian_rdp(DEFAULT_ORDERS, z, 1.0), delta, warn=False)[0]


def calibrate_gaussian_multiplier(epsilon: float, rounds: int, delta: float) -> float:
    """Smallest z with gaussian_composed_epsilon(z) <= epsilon (bracketed bisection; eps decreasing in z)."""
    epsilon = check_real("epsilon", epsilon, lo=0.0, lo_open=True)
    lo, hi = 1e-3, 1.0
    while gaussian_composed_epsilon(hi, rounds, delta) > epsilon:
        hi *= 2.0
        if hi > 1e12:
            raise ParameterError(f"Target epsilon={epsilon} unreachable for rounds={rounds}, delta={delta}.")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_composed_epsilon(mid, rounds, delta) > epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def underdelivered_epsilon(
    target_epsilon: float, n_calibrated: int, n_arrived: int, rounds: int, delta: float
) -> tuple[float, float]:
    """(z_calibrated, eps_actual): noise calibrated to ``target_epsilon`` with n0 shares, only n1 arrive.

    Total std scales by sqrt(n1/n0) (variances add), so z_actual = z sqrt(n1/n0); eps recomputed with the
    same accountant. Example: eps 6, n0 = 100, n1 = 50, T = 1500, delta = 1e-5 -> 9.04 (9.08 with integer orders
    only)."""
    n0 = check_int("n_calibrated", n_calibrated, lo=1)
    n1 = check_int("n_arrived", n_arrived, lo=1, hi=n0)
    z = calibrate_gaussian_multiplier(target_epsilon, rounds, delta)
    return z, gaussian_composed_epsilon(z * math.sqrt(n1 / n0), rounds, delta)


def p_versus_gamma(
    n: int,
    p: float,
    dropout: float,
    sigma: float,
    rounds: int,
    delta: float,
    orders: np.ndarray | None = None,
    *,
    amplification: str = "auto",
    dropout_stages: int = PROTOCOL_DROPOUT_STAGES,
) -> dict[str, Any]:
    """Distributed check-in Gaussian (replace-one): eps with the true rate gamma = p(1-p')^N and with p.

    Returns both; ``conservative`` is True iff eps(p) >= eps(gamma). Not a theorem: a numerical check, and
    its answer depends on the subsampling bound (``amplification`` as in ``SubsampledCheckin``)."""
    from secagg_dp.accounting.checkin.bases import GaussianSum
    from secagg_dp.accounting.checkin.mixture import CHECKIN_ORDERS, SubsampledCheckin, checkin_epsilon

    orders = CHECKIN_ORDERS if orders is None else np.asarray(orders)
    gamma = effective_checkin_rate(p, dropout, dropout_stages)
    prov = SubsampledCheckin(GaussianSum(sigma), n, amplification=amplification)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e_g = checkin_epsilon(prov, n, gamma, rounds, delta, orders).epsilon
        e_p = checkin_epsilon(prov, n, p, rounds, delta, orders).epsilon
    return {"gamma": gamma, "epsilon_gamma": e_g, "epsilon_p": e_p, "conservative": e_p >= e_g}
