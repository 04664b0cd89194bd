"""Empirical LOWER bounds on epsilon (privacy auditing): statistics only, no simulator.

A lower bound is an estimate with a stated confidence, never a certificate: it can show that a mechanism
is *not* (epsilon, delta)-DP for the observer it was measured for, never that it is private.

* :mod:`secagg_dp.audit.bounds`: Clopper-Pearson intervals, the (FPR, FNR) -> epsilon lower bound of a
  hypothesis test at delta (Kairouz, Oh & Viswanath 2015 Thm 2.1; used for auditing by Jagielski, Ullman &
  Oprea 2020 and Nasr et al. 2021), and threshold selection on held-out trials.
* :mod:`secagg_dp.audit.one_run`: the one-run audit of Steinke, Nasr & Jagielski 2023 (m canaries, each
  included by a fair coin, r guesses of which v correct).
* :mod:`secagg_dp.audit.llr`: exact log likelihood ratios of a canary coordinate under Skellam noise or a sum of
  discrete Gaussians (the most powerful test, Neyman-Pearson), and the analyst's mixture.
"""

from __future__ import annotations

from secagg_dp.audit.bounds import (
    AuditEstimate,
    audit_from_scores,
    clopper_pearson,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
)
from secagg_dp.audit.llr import ddg_sum_log_pmf, exact_llr, mixture_llr, skellam_log_pmf
from secagg_dp.audit.one_run import one_run_epsilon_lower, one_run_p_value

__all__ = [
    "AuditEstimate",
    "audit_from_scores",
    "clopper_pearson",
    "clopper_pearson_upper",
    "ddg_sum_log_pmf",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "exact_llr",
    "mixture_llr",
    "one_run_epsilon_lower",
    "one_run_p_value",
    "skellam_log_pmf",
]
