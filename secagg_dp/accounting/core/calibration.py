"""Calibration: the smallest noise meeting a target (ε, δ), by bracketed bisection in log space."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.accounting.core.events import Gaussian, sampled, sum_l2_sensitivity
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS, check_orders
from secagg_dp.errors import ParameterError

__all__ = ["calibrate_noise", "gaussian_epsilon", "calibrate_gaussian_noise_multiplier"]


def calibrate_noise(
    epsilon_of: Callable[[float], float],
    target_epsilon: float,
    *,
    lo: float = 1e-3,
    hi: float = 1e3,
    rtol: float = 1e-6,
    max_expansions: int = 40,
) -> float:
    """Smallest noise x (to relative precision ``rtol``) with ``epsilon_of(x) <= target_epsilon``.

    ``epsilon_of`` must be non-increasing in x. The bracket [lo, hi] is widened geometrically (×/÷ 4, at most
    ``max_expansions`` times each way) until ε(hi) ≤ target < ε(lo); then bisection on log x keeps that
    invariant, and the returned value is the upper end, so ε(returned) ≤ target always holds.
    Raises :class:`ParameterError` when no x in the widened bracket reaches the target.
    """
    t = check_real("target_epsilon", target_epsilon, lo=0.0, lo_open=True)
    lo = check_real("lo", lo, lo=0.0, lo_open=True)
    hi = check_real("hi", hi, lo=lo, lo_open=True)
    check_real("rtol", rtol, lo=0.0, lo_open=True)
    f_hi = epsilon_of(hi)
    k = 0
    while not f_hi <= t:
        if k >= max_expansions:
            raise ParameterError(
                f"Target epsilon {t:g} is unreachable: epsilon is still {f_hi:.6g} at noise {hi:.6g}. "
                "To fix, raise the target, the number of bits, or lower the rounds / sampling rate."
            )
        lo, hi = hi, hi * 4.0
        f_hi = epsilon_of(hi)
        k += 1
    k = 0
    while epsilon_of(lo) <= t:
        if k >= max_expansions:
            return lo  # essentially no noise is needed
        hi, lo = lo, lo / 4.0
        k += 1
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if epsilon_of(mid) <= t:
            hi = mid
        else:
            lo = mid
    return hi


def gaussian_epsilon(
    noise_multiplier: float,
    *,
    delta: float,
    rounds: int = 1,
    neighbouring: str = "add-remove",
    sample_rate: float = 1.0,
    sampling: str = "poisson",
    population: int | None = None,
    orders: Any = DEFAULT_ORDERS,
    warn: bool = True,
) -> tuple[float, float, Any]:
    """(ε, order, rdp) for ``rounds`` releases of a clipped sum with Gaussian noise σ = z·C.

    The sensitivity is C (add-remove) or 2C (replace-one), chosen here: z is never pre-halved by the user.
    Poisson sampling needs add-remove, sampling without replacement needs replace-one.
    """
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0, lo_open=True)
    r = check_int("rounds", rounds, lo=0)
    a = check_orders(orders)
    base = Gaussian(sigma=z, l2_sensitivity=sum_l2_sensitivity(1.0, neighbouring), neighbouring=neighbouring)
    if sample_rate != 1.0:
        want = "add-remove" if sampling == "poisson" else "replace-one"
        if neighbouring != want:
            raise ParameterError(
                f"Argument 'neighbouring' must be {want!r} with sampling={sampling!r}, not {neighbouring!r}."
            )
    ev = sampled(base, sample_rate=sample_rate, sampling=sampling, population=population)
    rdp = r * ev.rdp(a)
    eps, order = rdp_to_dp(a, rdp, delta, warn=warn)
    return eps, order, rdp


def calibrate_gaussian_noise_multiplier(target_epsilon: float, **kwargs: Any) -> tuple[float, float]:
    """Smallest noise multiplier z (σ = z·C) with ε ≤ target; returns (z, achieved ε).

    Keyword arguments as :func:`gaussian_epsilon` (delta, rounds, neighbouring, sample_rate, sampling,
    population, orders). ε is non-increasing in z for every event used, so bisection is exact up to rtol.
    """
    kwargs = dict(kwargs, warn=False)
    z = calibrate_noise(lambda x: gaussian_epsilon(x, **kwargs)[0], target_epsilon, lo=0.1, hi=10.0)
    return z, gaussian_epsilon(z, **kwargs)[0]
