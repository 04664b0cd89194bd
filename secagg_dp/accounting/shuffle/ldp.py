"""Shuffled check-in with generic (ε0, δ0)-LDP randomizers (LHT22 Sec. 3) and ε0-LDP bounds (SCI22).

Replace-one neighbours. Building blocks:

* :func:`fmt_shuffle` — Feldman, McMillan & Talwar (2021) Thm 3.8 as quoted in LHT22 Eq. 8–9:
  ε = log(1 + (e^{ε0}−1)/(e^{ε0}+1)·(8√(e^{ε0} log(4/δ1))/√n + 8e^{ε0}/n)),
  δ = δ1 + (e^{ε0}+1)(1 + e^{−ε0}/2)·n·δ0, valid when ε0 ≤ log(n/(16 log(2/δ1))); outside that range there is
  no amplification and (ε0, δ0) is returned (shuffling is post-processing of the one differing report).
* :func:`subsample_dp` — Balle, Barthe & Gaboardi (2018) Thm 9 (LHT22 Eq. 10): rate r without
  replacement gives (log(1 + r(e^ε − 1)), rδ).
* :func:`first_cut` — LHT22 Thm 1 / Eq. 13–14 with δ = β + δ_l, β = P(Bin(n, γ) ≥ l). Eq. 4 prints the
  factor (e^{ε0}−1)/e^{ε0}; Eq. 11 and 13 (its derivation) give (e^{ε0}−1)/(e^{ε0}+1), which we use.
* Approaches 1 and 2 (LHT22 Sec. 3.3) over LHT22 Thm 2 (rate k/n for k check-ins).

Departure from LHT22, on purpose: its Lemma 1 turns (ε, δ)-DP with δ > 0 into a finite RDP, which is
false in general (:func:`secagg_dp.accounting.core.conversion.dp_to_rdp`). We carry δ instead: each per-round guarantee
is ε-RR outside an event of probability δ ("δ-approximate RDP"), RDP composes on the ε part, and the final
δ is δ_conv + T·δ_round. No cited result proves this accounting through shuffling, subsampling and the
check-in mixture, so the results are estimates, not certificates (the command line says
``bound: "estimate"``, ``certificate: false``); the FMT and first-cut formulas are taken from the cited papers.

SCI22 (the self check-in workshop draft of Liew, Hasegawa & Takahashi) Thm 2 ("upper") and Thm 3 (lower)
for ε0-LDP randomizers are implemented as printed, with the garbled constants of Thm 2 read as in Girgis et
al. (2021) (see :func:`seed000_upper_log_moment`). **Thm 2 as read here is an ESTIMATE, not an upper
bound**: for binary randomized response (an ε0-LDP randomizer) at small nγ it is below the exact Rényi
divergence and, converted to (ε, δ), below the exact privacy loss (n = 2, γ = 0.1, ε0 = 1, T = 1,
δ = 1e-5: ε = 0.4307, where the exact hockey-stick divergence is 0.0164 = 1640 δ; brute-force enumeration
in tests/accounting/shuffle/test_shuffle_checkin.py). The draft's Appendix C proof is not available to us
and the constants are our reading, so no certificate is claimed (``certificate=False``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, logsumexp

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.tails import log_binom_pmf
from secagg_dp.accounting.core.conversion import pure_dp_to_rdp, rdp_to_dp
from secagg_dp.accounting.core.logspace import log1p_exp
from secagg_dp.accounting.core.subsampling import wor_subsampled_log_am1
from secagg_dp.errors import ParameterError

__all__ = [
    "NEIGHBOURING",
    "LDPResult",
    "fmt_shuffle",
    "subsample_dp",
    "first_cut",
    "first_cut_epsilon",
    "approach_epsilon",
    "seed000_upper_rdp",
    "seed000_lower_rdp",
]


def _binom() -> Any:
    """scipy.stats.binom, imported on first use (scipy.stats costs about a second to import)."""
    from scipy.stats import binom

    return binom


NEIGHBOURING = "replace-one"


#: What an :class:`LDPResult` may be: "upper" (a proven upper bound on ε), "lower" (a proven lower bound on ε),
#: "rdp-lower" (an RDP lower bound passed through the upper-bound RDP→DP conversion of Canonne, Kamath & Steinke
#: 2020, Prop. 12: neither an upper nor a lower bound on ε) or "estimate" (neither, unproven).
LDP_BOUND_KINDS = ("upper", "lower", "rdp-lower", "estimate")


@dataclass(frozen=True)
class LDPResult:
    """(ε, δ) after ``rounds`` compositions, with the best order and the method that produced it.

    ``observer`` is "analyst": the figure covers whoever sees only the shuffled reports; a party that sees
    each report before shuffling is protected by the local randomizer alone. ``bound`` says what the figure
    is (:data:`LDP_BOUND_KINDS`) and ``certificate`` whether it is a privacy certificate (only a proven
    upper bound may be); every result this module computes is an estimate (module docstring)."""

    epsilon: float
    delta: float
    order: float
    method: str
    observer: str = "analyst"
    bound: str = "estimate"
    certificate: bool = False

    def __post_init__(self) -> None:
        if self.bound not in LDP_BOUND_KINDS:
            raise ParameterError(f"Argument 'bound' must be one of {LDP_BOUND_KINDS}, not {self.bound!r}.")
        if not isinstance(self.certificate, bool):
            raise ParameterError(f"Argument 'certificate' must be True or False, not {self.certificate!r}.")
        if self.certificate and self.bound != "upper":
            raise ParameterError(f"Argument 'certificate' may be True only for bound 'upper', not {self.bound!r}.")


def fmt_shuffle(
    eps0: float, delta0: float, n: npt.ArrayLike, delta1: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """LHT22 Eq. 8–9 (FMT21 Thm 3.8), vectorised over ``n``; (ε0, δ0) outside the validity range."""
    n = np.asarray(n, dtype=np.float64)
    e0 = np.float64(eps0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # numpy exp: e^{ε0} overflows to inf for ε0 > 709, where the theorem's validity range fails anyway
        # (ε0 ≤ log(n / (16 log(2/δ1))) needs n > e^{709}); such rows fall back to (ε0, δ0) below.
        valid = (n > 0) & (e0 <= np.log(n / (16.0 * math.log(2.0 / delta1))))
        amp = np.log1p(
            (np.tanh(e0 / 2.0))
            * (8.0 * np.sqrt(np.exp(e0) * math.log(4.0 / delta1)) / np.sqrt(n) + 8.0 * np.exp(e0) / n)
        )
        d = delta1 + (np.exp(e0) + 1.0) * (1.0 + np.exp(-e0) / 2.0) * n * delta0
    use = valid & (amp < e0)
    return np.where(use, amp, e0), np.where(use, d, delta0)


def subsample_dp(
    eps: npt.ArrayLike, delta: npt.ArrayLike, rate: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Balle et al. 2018 Thm 9 (LHT22 Eq. 10): without replacement at ``rate``, replace-one."""
    rate = np.asarray(rate, dtype=np.float64)
    with np.errstate(divide="ignore"):  # log(1 + r(e^ε − 1)) = log((1 − r) + r e^ε), no overflow at large ε
        eps_sub = np.logaddexp(np.log1p(-rate), np.log(rate) + eps)
    return eps_sub, rate * np.asarray(delta)


def _check_common(
    eps0: float, delta0: float, n: int, gamma: float, delta: float
) -> tuple[float, float, int, float, float]:
    eps0 = check_real("eps0", eps0, lo=0.0, lo_open=True)
    delta0 = check_real("delta0", delta0, lo=0.0, hi=1.0, hi_open=True)
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    return eps0, delta0, n, gamma, delta


def first_cut(eps0: float, delta0: float, *, n: int, gamma: float, l: int, delta1: float) -> tuple[float, float]:  # noqa: E741 (LHT22's l, a public keyword)
    """LHT22 Thm 1: one round of shuffled check-in as (ε, δ) = (ε_l, β + δ_l) with at most l check-ins."""
    eps0, delta0, n, gamma, delta1 = _check_common(eps0, delta0, n, gamma, delta1)
    l = check_int("l", l, lo=1, hi=n)  # noqa: E741 (LHT22's symbol)
    beta = float(_binom().sf(l - 1, n, gamma))
    e_sh, d_sh = fmt_shuffle(eps0, delta0, l, delta1)
    e, d = subsample_dp(float(e_sh), float(d_sh), l / n)
    return float(e), float(d) + beta


def _compose_approx(
    orders: npt.NDArray[np.int64], rdp_round: npt.ArrayLike, delta_round: float, rounds: int, delta: float
) -> tuple[float, float] | None:
    """δ-approximate RDP composition: ε from T·rdp at δ − T·δ_round (None if δ is exhausted)."""
    left = delta - rounds * delta_round
    if left <= 0:
        return None
    # a windowed sum can fall a rounding hair below 0; RDP >= 0, so 0 is an upper bound there
    eps, order = rdp_to_dp(orders, rounds * np.maximum(np.asarray(rdp_round), 0.0), left, warn=False)
    return eps, order


def first_cut_epsilon(
    eps0: float, delta0: float, *, n: int, gamma: float, rounds: int, delta: float, max_order: int = 256
) -> LDPResult:
    """LHT22 baseline: Thm 1 per round → RDP of the ε part → compose ``rounds`` → (ε, δ); best l scanned."""
    eps0, delta0, n, gamma, delta = _check_common(eps0, delta0, n, gamma, delta)
    rounds = check_int("rounds", rounds, lo=1)
    orders = np.arange(2, check_int("max_order", max_order, lo=2) + 1)
    mean = n * gamma
    ls = np.unique(np.clip(np.round(mean + np.linspace(0, 12, 97) * math.sqrt(max(mean, 1.0))), 1, n)).astype(int)
    best = LDPResult(math.inf, delta, math.nan, "first-cut")
    for l in ls:  # noqa: E741 (LHT22's symbol)
        e, d = first_cut(eps0, delta0, n=n, gamma=gamma, l=int(l), delta1=delta / (4.0 * rounds))
        res = _compose_approx(orders, pure_dp_to_rdp(e, orders), d, rounds, delta)
        if res is not None and res[0] < best.epsilon:
            best = LDPResult(res[0], delta, res[1], "first-cut (LHT22 Thm 1)")
    return best


def approach_epsilon(
    eps0: float,
    delta0: float,
    *,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    approach: int,
    max_order: int = 64,
    tail: float = 1e-15,
) -> LDPResult:
    """LHT22 Approach 1 or 2 over Thm 2 (Σ_k Bin(k; n, γ)·moment_k, rate k/n), windowed over k.

    Approach 1: FMT on k reports → RDP (ε part) → WBK subsampling at k/n. Approach 2: FMT → Balle
    subsampling at k/n → RDP. δ per round = E_k[δ_k] (+ the omitted binomial tail, counted as δ).
    δ1 inside FMT is set to δ/(4T), leaving most of δ for the conversion.
    """
    eps0, delta0, n, gamma, delta = _check_common(eps0, delta0, n, gamma, delta)
    rounds = check_int("rounds", rounds, lo=1)
    if approach not in (1, 2):
        raise ParameterError(f"Argument 'approach' must be 1 or 2, not {approach!r}.")
    L = check_int("max_order", max_order, lo=2, hi=4096)
    orders = np.arange(2, L + 1)
    lo = int(_binom().ppf(tail / 2, n, gamma))
    hi = int(_binom().isf(tail / 2, n, gamma))
    ks = np.arange(max(lo, 1), min(hi, n) + 1)
    outside = float(
        _binom().cdf(max(lo, 1) - 1, n, gamma) - _binom().pmf(0, n, gamma) + _binom().sf(min(hi, n), n, gamma)
    )
    delta1 = delta / (4.0 * rounds)
    e_sh, d_sh = fmt_shuffle(eps0, delta0, ks, delta1)
    rate = ks / n
    if approach == 1:
        base = np.zeros((ks.size, L + 1))
        base[:, 2:] = pure_dp_to_rdp(e_sh, orders)  # ε_k(j), j = 2..L
        log_mom = log1p_exp(wor_subsampled_log_am1(base, rate, orders))  # WBK19 Thm 9, uncapped
        d_k = rate * d_sh  # δ part of the k-th subsampled component
    else:
        e_ss, d_k = subsample_dp(e_sh, d_sh, rate)
        log_mom = pure_dp_to_rdp(e_ss, orders) * (orders - 1.0)
    lw = log_binom_pmf(n, ks, gamma)
    log_sum = logsumexp(lw[:, None] + log_mom, axis=0)
    if lo <= 0:
        log_sum = np.logaddexp(log_sum, float(log_binom_pmf(n, np.array([0]), gamma)[0]))
    rdp = log_sum / (orders - 1.0)
    delta_round = float(np.sum(np.exp(lw) * d_k)) + outside
    res = _compose_approx(orders, rdp, delta_round, rounds, delta)
    if res is None:
        return LDPResult(math.inf, delta, math.nan, f"approach {approach} (LHT22 Sec. 3.3)")
    return LDPResult(res[0], delta, res[1], f"approach {approach} (LHT22 Sec. 3.3)")


#: (e^{2ε0} − 1)² overflows float64 beyond ε0 ≈ 177; the closed forms below are refused above this.
_SEED000_EPS0_MAX = 150.0


def seed000_upper_log_moment(
    eps0: float, *, n: int, gamma: float, orders: npt.ArrayLike, big_delta: float
) -> np.ndarray:
    """log of the SCI22 Thm 2 (Eq. 7) expression for E[(M(D)/M(D'))^λ], ε0-LDP randomizers, fixed Δ.

    SCI22 is the self check-in workshop draft of Liew, Hasegawa & Takahashi. The extraction prints
    e^{−ε0/l̃}, l̃ = ⌊(1−Δ)nγ/(2ε0)⌋ + 1, (2(e^{2ε0}−1)²/e^{2ε0})^{j/2} and e^{−(k−1)/(8ε0)}; we read them as
    in the subsampled-shuffle RDP bound of Girgis et al. (2021) that the proof invokes: e^{−ε0}/l̃,
    l̃ = ⌊(1−Δ)nγ/(2e^{ε0})⌋ + 1, ((e^{2ε0}−1)²/(2e^{2ε0}))^{j/2} and e^{−(k−1)/(8e^{ε0})}. An ESTIMATE,
    NOT an upper bound: below the exact moment of binary randomized response at small nγ (module docstring).
    """
    lam = np.asarray(orders, dtype=np.float64)
    D = big_delta
    chern = -D * D * n * gamma / 2.0
    lt = math.floor((1.0 - D) * n * gamma / (2.0 * math.exp(eps0))) + 1
    a = math.expm1(eps0) ** 2
    t2 = (
        np.log(4.0)
        + np.log(lam * (lam - 1) / 2)
        + 2 * math.log(gamma)
        + math.log(a)
        + np.logaddexp(-eps0 + chern, -eps0 - math.log(lt))
    )
    terms = [np.zeros_like(lam), t2]
    c = (math.expm1(2 * eps0) ** 2) / (2.0 * math.exp(2 * eps0))
    out = np.empty_like(lam)
    for i, lv in enumerate(lam):
        j = np.arange(3, int(lv) + 1, dtype=np.float64)
        if j.size:
            tj = (
                gammaln(lv + 1)
                - gammaln(j + 1)
                - gammaln(lv - j + 1)
                + j * math.log(gamma)
                + np.log(j)
                + gammaln(j / 2)
                + (j / 2) * math.log(c)
                + np.logaddexp(chern, -(j / 2) * math.log(lt))
            )
            out[i] = logsumexp(tj)
        else:
            out[i] = -np.inf
    terms.append(out)
    x = gamma * math.expm1(2 * eps0) / math.exp(eps0)
    log_ups_base = lam * math.log1p(x) + np.log1p(-(1 + lam * x) / (1 + x) ** lam)

    def ups(k: int) -> npt.NDArray[np.float64]:
        return log_ups_base - (k - 1) / (8.0 * math.exp(eps0))

    k1 = math.floor((1 - D) * n * gamma) + 1
    terms.append(ups(1) + chern)
    terms.append(ups(k1))
    result: npt.NDArray[np.float64] = logsumexp(np.stack(terms), axis=0)
    return result


def seed000_upper_rdp(
    eps0: float, *, n: int, gamma: float, orders: npt.ArrayLike, deltas: npt.ArrayLike | None = None
) -> np.ndarray:
    """SCI22 Thm 2 "upper bound" on the shuffled check-in RDP (ε0-LDP), minimised over Δ ∈ (0, 1): an ESTIMATE.

    Replace-one neighbours, observer the analyst (sees the shuffled reports). The self check-in draft's
    (Liew, Hasegawa & Takahashi, workshop draft) Thm 2 with our reading of its constants; NOT a certificate:
    for binary randomized response it is below the exact RDP at small nγ (e.g. n = 2, γ = 0.1, ε0 = 1,
    order 64: 0.330 versus the exact 0.917), see the module docstring."""
    eps0 = check_real("eps0", eps0, lo=0.0, hi=_SEED000_EPS0_MAX, lo_open=True)
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    lam = np.asarray(orders, dtype=np.float64)
    grid = np.linspace(0.02, 0.98, 49) if deltas is None else np.asarray(deltas, dtype=np.float64)
    best = np.full(lam.shape, np.inf)
    for D in grid:
        best = np.minimum(best, seed000_upper_log_moment(eps0, n=n, gamma=gamma, orders=lam, big_delta=float(D)))
    return best / (lam - 1.0)


def seed000_lower_rdp(
    eps0: float, *, n: int, gamma: float, orders: npt.ArrayLike, deltas: npt.ArrayLike | None = None
) -> np.ndarray:
    """SCI22 Thm 3 (Eq. 8) LOWER bound (binary randomized response), maximised over Δ ∈ (0, 1]."""
    eps0 = check_real("eps0", eps0, lo=0.0, hi=_SEED000_EPS0_MAX, lo_open=True)
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    lam = np.asarray(orders, dtype=np.float64)
    grid = np.linspace(0.02, 1.0, 50) if deltas is None else np.asarray(deltas, dtype=np.float64)
    best = np.zeros(lam.shape)
    for D in grid:
        v = np.log1p(
            -math.expm1(-D * D * n * gamma / (2 + D))
            * lam
            * (lam - 1)
            / 2
            * gamma**2
            * math.expm1(eps0) ** 2
            / ((1 + D) * n * gamma * math.exp(eps0))
        )
        best = np.maximum(best, v)
    return best / (lam - 1.0)
