"""A proven LOWER bound on the (ε, δ) of the shuffle Gaussian: the sum of the shuffled reports.

Mechanism: each of ``n`` users adds N(0, σ²) to a value of L2 sensitivity 1 and a trusted shuffler permutes
the ``n`` reports; ``rounds`` = T independent rounds on the same data. Replace-one neighbours; observer: the
analyst, who sees the shuffled reports.

Take the pair D = (0, …, 0), D' = (1, 0, …, 0) and post-process each round's shuffled reports by their sum (a
function of the multiset, so of what the analyst sees): N(0, nσ²) under D and N(1, nσ²) under D'. Over T rounds the
T sums are N(0, nσ² I_T) versus N(1_T, nσ² I_T); their likelihood ratio depends on them only through their total,
N(0, Tnσ²) versus N(T, Tnσ²), so their privacy profile is that of one Gaussian shift μ = √T/(σ√n) (as in the
composition of Gaussian DP, Dong, Roth & Su 2022), with δ_μ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang
2018, Thm 8). DP is closed under post-processing (Dwork & Roth 2014, Prop. 2.1): if the T-round mechanism were
(ε, δ)-DP, so would the sums be. Hence every ε with δ_μ(ε) > δ is NOT achievable, and the mechanism's smallest ε at δ
is at least ε_μ(δ) = min{ε ≥ 0 : δ_μ(ε) ≤ δ}. This is a lower bound on the epsilon itself (not on an RDP curve),
never a certificate. For n = 1 it is exact (the shuffle of one report is the Gaussian mechanism).
"""

from __future__ import annotations

import math

from scipy.special import log_ndtr

from secagg_dp._validate import check_int, check_real

__all__ = ["gaussian_shift_delta", "shuffle_gaussian_epsilon_lower"]


def gaussian_shift_delta(epsilon: float, mu: float) -> float:
    """δ_μ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) for N(μ, 1) against N(0, 1) (Balle & Wang 2018, Thm 8).

    Evaluated as Φ(a)·(1 − e^{ε + log Φ(b) − log Φ(a)}) with log Φ from ``log_ndtr``, which keeps relative
    precision where both terms are tiny. The exponent is <= 0 exactly (δ >= 0); where rounding of terms near
    1e20 makes it positive it is taken as 0 (δ = 0, below the exact value: the ε searched for by
    :func:`shuffle_gaussian_epsilon_lower` can only get smaller, so it stays a lower bound)."""
    eps = check_real("epsilon", epsilon, lo=0.0)
    m = check_real("mu", mu, lo=0.0, lo_open=True)
    la = float(log_ndtr(m / 2.0 - eps / m))
    lb = float(log_ndtr(-m / 2.0 - eps / m))
    return math.exp(la) * -math.expm1(min(eps + lb - la, 0.0))


def shuffle_gaussian_epsilon_lower(*, n: int, sigma: float, rounds: int, delta: float) -> float:
    """Proven lower bound on the ε at ``delta`` of ``rounds`` rounds of the shuffle Gaussian (module docstring).

    ε_μ(δ) for μ = √T/(σ√n), found by bisection on the decreasing δ_μ(ε); the value returned is the largest
    bisection point at which δ_μ(ε) > δ was evaluated (or 0), so rounding of the search cannot raise it."""
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    t = check_int("rounds", rounds, lo=1)
    d = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    mu = math.sqrt(t) / sigma / math.sqrt(n)
    if not math.isfinite(mu):  # σ so small that μ overflows: the shift is certain, no finite ε at δ < 1
        return math.inf
    lo, hi = 0.0, 1.0
    if gaussian_shift_delta(lo, mu) <= d:
        return 0.0
    while gaussian_shift_delta(hi, mu) > d:
        if hi > 1e300:
            return lo
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if gaussian_shift_delta(mid, mu) > d:
            lo = mid
        else:
            hi = mid
    return lo
