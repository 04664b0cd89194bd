"""The one-run audit (Steinke, Nasr & Jagielski 2023): m canaries, each included by a fair coin, in ONE run.

Setting (their Sec. 3): S in {-1, +1}^m i.i.d. uniform decides each canary (here: canary i holds +C u_i or
its replacement -C u_i, one replace-one neighbouring step each); the auditor sees the run's output, makes
r <= m guesses T_i in {-1, +1} (abstaining on the other m - r) and scores W = #{i : T_i = S_i}. If the run is
(epsilon, delta)-DP with respect to changing any one S_i, then (their Theorem 3, approximate DP; Theorem 2
is the pure case delta = 0, where W is stochastically dominated by Binomial(r, q))

    P[W >= v] <= P[Binomial(r, q) >= v] + 2 m delta * max_{1 <= i <= v} P[v - i <= Binomial(r, q) < v] / i,

with q = e^epsilon / (1 + e^epsilon), the accuracy of epsilon-DP randomized response. This module implements
exactly that right-hand side (:func:`one_run_p_value`, capped at 1) and inverts it: the returned
epsilon_lower is the largest epsilon whose p-value stays below 1 - confidence, so a mechanism with a
smaller epsilon would produce at least v correct guesses with probability below 1 - confidence.
"""

from __future__ import annotations

import math

import numpy as np

from secagg_dp._validate import check_int, check_real

__all__ = ["one_run_p_value", "one_run_epsilon_lower"]


def _counts(m: int, r: int, v: int) -> tuple[int, int, int]:
    mm = check_int("m", m, lo=1)
    rr = check_int("r", r, lo=0, hi=mm)
    vv = check_int("v", v, lo=0, hi=rr)
    return mm, rr, vv


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[W >= v] bound of Steinke, Nasr & Jagielski 2023 (Theorem 3) for an (epsilon, delta)-DP run.

    ``m`` canaries, ``r`` guesses, ``v`` correct: min(1, P[Bin(r, q) >= v] + 2 m delta max_i P[v-i <= Bin(r, q) < v]/i),
    q = e^eps / (1 + e^eps).
    """
    mm, rr, vv = _counts(m, r, v)
    eps = check_real("epsilon", epsilon, lo=0.0)
    d = check_real("delta", delta, lo=0.0, hi=1.0)
    from scipy.stats import binom

    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(binom.sf(vv - 1, rr, q)) if vv > 0 else 1.0
    alpha = 0.0
    if vv > 0 and d > 0.0:
        below = np.cumsum(binom.pmf(np.arange(vv - 1, -1, -1), rr, q))  # [i-1]: P[v - i <= Bin(r, q) < v]
        alpha = float(np.max(below / np.arange(1, vv + 1)))
    return min(1.0, tail + 2.0 * mm * d * alpha)


def one_run_epsilon_lower(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest epsilon with :func:`one_run_p_value` < 1 - ``confidence`` (bisection to 1e-6; 0 if none).

    A LOWER bound on the run's epsilon at ``delta`` with that confidence (Steinke, Nasr & Jagielski 2023,
    Theorem 3 inverted as in their Sec. 5).
    """
    mm, rr, vv = _counts(m, r, v)
    d = check_real("delta", delta, lo=0.0, hi=1.0)
    conf = check_real("confidence", confidence, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    alpha = 1.0 - conf
    if one_run_p_value(mm, rr, vv, 0.0, d) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(mm, rr, vv, hi, d) < alpha:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if one_run_p_value(mm, rr, vv, mid, d) < alpha:
            lo = mid
        else:
            hi = mid
    return lo
