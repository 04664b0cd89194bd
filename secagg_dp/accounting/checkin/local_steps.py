"""Multiple local DP-SGD steps with joint noise scaling (Hei24: Def. 4.2, Lemmas 4.3-4.6, Thm 4.7, Appendix).

Sample-level DP. Each participating client runs S local steps; step s clips per-sample gradients to C_s,
adds noise of std C_s sigma_s, samples its minibatch by Poisson sampling with rate q, and the summed
update goes through secure aggregation. By Thm 4.7 (with Lemma 4.6: releasing the per-step sums is at
least as informative as their total) each step is accounted with a *sum-dominating* mechanism: for
infinitely divisible noise (Lemma 4.3: Gaussian, Skellam) the step is one additive mechanism with the
clients' noise added up. Heterogeneous learning rates gamma_i = gamma_1 / l_i, clipping C_i, noise sigma_i
(Hei24 Appendix, Eqs. 22-24): variance sum_i C_i^2 sigma_i^2 / l_i^2, sensitivity max_i C_i / l_i.
Clients with more steps are *fused* (Appendix, Eqs. 26-27): m consecutive steps become one step with
sensitivity sum of their clipping norms (triangle inequality) and noise variance the sum of theirs.

Neighbouring relation: ``add-remove`` of one sample (Hei24's "unbounded" DP) for Poisson q < 1
(Mironov, Talwar & Zhang 2019, exact integer-order RDP for the Gaussian). With q = 1 both relations are
available (``replace-one`` doubles the sensitivity). For Skellam / distributed discrete Gaussian with
q < 1 we use the generic joint-convexity bound 1/(a-1) log(1 + q expm1((a-1) eps(a))) (valid in both
directions of add/remove) instead of Zhu & Wang 2019 -- looser at small q, chosen for simplicity.

Inside the check-in mixture the k-client base mechanism is the S-step composition with k clients' joint
noise (``LocalStepsGaussian`` etc. implement ``rdp_upper``); client check-in then amplifies only through
joint convexity (:class:`secagg_dp.accounting.checkin.mixture.SubsampledCheckin` with
``amplification="joint-convexity"``), because WBK19 Thm 9 needs client-level replace-one bounds that
sample-level clipping does not give.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.bases import DDGSum, SkellamSum
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.accounting.core.logspace import log_expm1
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS
from secagg_dp.accounting.core.subsampling import poisson_subsampled_gaussian_rdp
from secagg_dp.errors import ParameterError

__all__ = [
    "LocalStep",
    "fuse_steps",
    "sum_dominating_step",
    "LocalStepsGaussian",
    "LocalStepsSkellam",
    "LocalStepsDDG",
    "heterogeneous_gaussian_rdp",
    "local_steps_epsilon",
    "calibrate_local_sigma",
    "table1_comparison",
]


@dataclass(frozen=True)
class LocalStep:
    """One local step of one client: clipping norm, absolute noise std, learning-rate ratio l = gamma_1/gamma_i."""

    clip: float
    noise_std: float
    lr_ratio: float = 1.0

    def __post_init__(self) -> None:
        check_real("clip", self.clip, lo=0.0, lo_open=True)
        check_real("noise_std", self.noise_std, lo=0.0)
        check_real("lr_ratio", self.lr_ratio, lo=0.0, lo_open=True)


def fuse_steps(steps: Sequence[LocalStep], groups: int) -> list[LocalStep]:
    """Fuse a client's steps into ``groups`` consecutive groups (Hei24 Appendix, Eqs. 26-27).

    A fused step has sensitivity sum of the clipping norms and noise variance sum of the variances; all
    steps of a group must share the learning-rate ratio (they are summed with the same weight)."""
    groups = check_int("groups", groups, lo=1)
    if len(steps) % groups:
        raise ParameterError(f"Argument 'groups' must divide the number of steps {len(steps)}, not {groups}.")
    m = len(steps) // groups
    out = []
    for g in range(groups):
        part = steps[g * m : (g + 1) * m]
        if len({s.lr_ratio for s in part}) != 1:
            raise ParameterError("Steps fused together must share the same 'lr_ratio'.")
        out.append(LocalStep(sum(s.clip for s in part), math.sqrt(sum(s.noise_std**2 for s in part)), part[0].lr_ratio))
    return out


def sum_dominating_step(steps: Sequence[LocalStep]) -> tuple[float, float]:
    """(noise variance, L2 sensitivity) of the sum-dominating Gaussian for one step across clients.

    Variance sum_i C_i^2 sigma_i^2 / l_i^2, sensitivity max_i C_i / l_i (Hei24 Appendix after Eq. 24).
    Sensitivity is per sample under add/remove (double it for replace-one)."""
    if not steps:
        raise ParameterError("Argument 'steps' must be non-empty.")
    var = sum((s.noise_std / s.lr_ratio) ** 2 for s in steps)
    sens = max(s.clip / s.lr_ratio for s in steps)
    return var, sens


def _joint_convexity(q: float, eps: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """1/(a-1) log(1 + q expm1((a-1) eps)): joint convexity of E_Q[(P/Q)^a] (Poisson mixture, add/remove)."""
    if q == 1.0:
        return eps
    a1 = np.asarray(orders, dtype=np.float64)[None, :] - 1.0
    return np.logaddexp(0.0, math.log(q) + log_expm1(a1 * eps)) / a1


@dataclass(frozen=True)
class LocalStepsGaussian:
    """k clients x S local steps, per-client per-step noise std sigma*C, Poisson rate q inside each client.

    eps_k(a) = S * eps_step(a; z_k) with z_k = sqrt(k) sigma (add-remove, sensitivity C) or sqrt(k) sigma/2
    (replace-one, q = 1 only); eps_step is exact MTZ19 for q < 1. Non-increasing in k."""

    sigma: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        check_real("sigma", self.sigma, lo=0.0, lo_open=True)
        check_int("steps", self.steps, lo=1)
        check_probability("sample_rate", self.sample_rate, allow_zero=False)
        if self.neighbouring not in ("add-remove", "replace-one"):
            raise ParameterError(f"Argument 'neighbouring' must be 'add-remove' or 'replace-one', not {self.neighbouring!r}.")
        if self.neighbouring == "replace-one" and self.sample_rate < 1.0:
            raise ParameterError("Poisson sampling inside the client (sample_rate < 1) is supported for 'add-remove' only.")

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.asarray(k_lo, dtype=np.float64)
        sens = 2.0 if self.neighbouring == "replace-one" else 1.0
        z = np.sqrt(k) * self.sigma / sens
        return self.steps * poisson_subsampled_gaussian_rdp(z, self.sample_rate, np.asarray(orders, dtype=np.float64))


@dataclass(frozen=True)
class LocalStepsSkellam:
    """k clients x S steps of Skellam noise (variance v per client per step, grid units), sensitivities in
    grid units per sample (add/remove); q < 1 via the joint-convexity bound. Infinitely divisible (Lemma 4.3)."""

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        check_int("steps", self.steps, lo=1)
        check_probability("sample_rate", self.sample_rate, allow_zero=False)
        SkellamSum(self.variance, self.l2_sensitivity, self.l1_sensitivity)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        e = SkellamSum(self.variance, self.l2_sensitivity, self.l1_sensitivity).rdp_upper(k_lo, k_hi, orders)
        return self.steps * _joint_convexity(self.sample_rate, e, orders)


@dataclass(frozen=True)
class LocalStepsDDG:
    """k clients x S steps of distributed discrete Gaussian noise (sum-dominated in the sense of Def. 4.2
    via the Kairouz-Liu-Steinke bound, Hei24 footnote 3); q < 1 via joint convexity."""

    sigma: float
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        check_int("steps", self.steps, lo=1)
        check_probability("sample_rate", self.sample_rate, allow_zero=False)
        DDGSum(self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        e = DDGSum(self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity).rdp_upper(k_lo, k_hi, orders)
        return self.steps * _joint_convexity(self.sample_rate, e, orders)


def heterogeneous_gaussian_rdp(
    clients: Sequence[Sequence[LocalStep]], sample_rate: float, orders: np.ndarray, *, common_steps: int | None = None
) -> np.ndarray:
    """RDP (add/remove, one sample) of one round with heterogeneous clients (fixed participants).

    Every client's step list is fused to ``common_steps`` (default: the smallest step count), then each
    fused step is the sum-dominating Gaussian of :func:`sum_dominating_step`, Poisson rate q (MTZ19),
    and the S steps compose (Lemma 4.5)."""
    q = check_probability("sample_rate", sample_rate, allow_zero=False)
    if not clients:
        raise ParameterError("Argument 'clients' must be non-empty.")
    s = common_steps or min(len(c) for c in clients)
    fused = [fuse_steps(list(c), s) for c in clients]
    orders = np.asarray(orders, dtype=np.int64)
    total = np.zeros(orders.size)
    for step in range(s):
        var, sens = sum_dominating_step([f[step] for f in fused])
        if var == 0.0:
            return np.full(orders.size, np.inf)
        total += poisson_subsampled_gaussian_rdp(math.sqrt(var) / sens, q, orders.astype(np.float64))
    return total


_ORDERS_DP = DEFAULT_ORDERS


def local_steps_epsilon(noise_multiplier: float, steps: int, sample_rate: float, delta: float, rounds: int = 1) -> float:
    """eps of ``rounds`` x ``steps`` Poisson-subsampled Gaussian steps, z = total std / sensitivity (add/remove)."""
    r = rounds * steps * poisson_subsampled_gaussian_rdp(noise_multiplier, sample_rate, _ORDERS_DP)
    return rdp_to_dp(_ORDERS_DP, r, delta, warn=False)[0]


def calibrate_local_sigma(epsilon: float, steps: int, sample_rate: float, delta: float) -> float:
    """Smallest z with local_steps_epsilon(z) <= epsilon (bracketed bisection, eps decreasing in z)."""
    lo, hi = 0.05, 1.0
    while local_steps_epsilon(hi, steps, sample_rate, delta) > epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            raise ParameterError(f"Target epsilon={epsilon} unreachable.")
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if local_steps_epsilon(mid, steps, sample_rate, delta) > epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return hi


def table1_comparison(
    parties: Sequence[int] = (1, 2, 5, 10), step_counts: Sequence[int] = (1, 10, 50),
    sample_rate: float = 0.1, epsilon: float = 5.0, delta: float = 1e-5,
) -> list[dict]:
    """Hei24 Table 1 with our accountant: calibrate sigma_LDP for one party (eps = 5, delta = 1e-5,
    add/remove, Poisson 0.1; 1 step, 1 epoch = 10 steps, 5 epochs = 50 steps), then average N models:
    joint noise sigma_total = sqrt(N) sigma_LDP (Thm 4.7 / Lemma 4.3), same S steps."""
    rows = []
    for s in step_counts:
        z = calibrate_local_sigma(epsilon, s, sample_rate, delta)
        for n in parties:
            zt = math.sqrt(n) * z
            rows.append({"steps": s, "parties": n, "sigma_total": zt,
                         "epsilon": local_steps_epsilon(zt, s, sample_rate, delta)})
    return rows
