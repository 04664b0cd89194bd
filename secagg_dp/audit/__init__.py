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

from secagg_dp.audit import bounds, llr, one_run
from secagg_dp.audit.bounds import *  # noqa: F403
from secagg_dp.audit.llr import *  # noqa: F403
from secagg_dp.audit.one_run import *  # noqa: F403

# The package only re-exports: its public names are those of its three modules.
__all__: list[str] = []
__all__ += bounds.__all__
__all__ += llr.__all__
__all__ += one_run.__all__
