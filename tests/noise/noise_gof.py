"""Chi-square goodness-of-fit helper shared by the noise tests.

Bins are built from the expected counts only (never from the data), so the number of degrees of freedom,
and hence the critical value, is fixed by (pmf, n) and does not depend on the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: False-failure rate of every statistical test in tests/noise (asymptotic chi-square / normal law).
ALPHA = 1e-6


@dataclass(frozen=True)
class GofResult:
    statistic: float
    df: int
    critical: float

    @property
    def passed(self) -> bool:
        return self.statistic <= self.critical


def chi2_gof(
    samples: np.ndarray,
    pmf: Callable[[np.ndarray], np.ndarray],
    half_width: int,
    *,
    min_expected: float = 20.0,
) -> GofResult:
    """Pearson chi-square of integer ``samples`` against a symmetric ``pmf`` on Z.

    Cells: each integer in [−half_width, half_width] plus the two tails, adjacent cells merged left to
    right until each expected count is ≥ ``min_expected`` (the last short group joins its neighbour).
    Critical value ``chi2.isf(ALPHA, df)`` with df = cells − 1.
    """
    x = np.asarray(samples).ravel()
    n = x.size
    k = np.arange(-half_width, half_width + 1)
    p = np.asarray(pmf(k), dtype=np.float64)
    tail = max(0.0, (1.0 - float(np.sum(p))) / 2.0)  # symmetric pmf: equal mass beyond each end
    probs = np.concatenate([[tail], p, [tail]])
    inner = x[(x >= -half_width) & (x <= half_width)]
    counts = np.concatenate(
        [
            [np.sum(x < -half_width)],
            np.bincount(inner + half_width, minlength=2 * half_width + 1),
            [np.sum(x > half_width)],
        ]
    )
    exp_groups: list[float] = []
    obs_groups: list[int] = []
    e_acc, o_acc = 0.0, 0
    for e, o in zip(probs * n, counts, strict=True):
        e_acc += e
        o_acc += int(o)
        if e_acc >= min_expected:
            exp_groups.append(e_acc)
            obs_groups.append(o_acc)
            e_acc, o_acc = 0.0, 0
    if exp_groups:
        exp_groups[-1] += e_acc
        obs_groups[-1] += o_acc
    e_arr = np.array(exp_groups)
    o_arr = np.array(obs_groups, dtype=np.float64)
    statistic = float(np.sum((o_arr - e_arr) ** 2 / e_arr))
    df = len(e_arr) - 1
    return GofResult(statistic, df, float(stats.chi2.isf(ALPHA, df)))


def z_two_sided() -> float:
    """Normal quantile z with P(|Z| > z) = ALPHA (≈ 4.892)."""
    return float(stats.norm.isf(ALPHA / 2))
