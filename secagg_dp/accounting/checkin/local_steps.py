"""Multiple local DP-SGD steps per round: sound per-k bases, and Heikkilä (2024)'s joint noise as a comparison.

Sample-level DP (one training example). Each participating client runs S local steps; step s Poisson-samples
its minibatch at rate q, clips per-sample gradients to C, adds its OWN noise of std sigma*C and updates its
local model; the sum of its S noisy steps goes through secure aggregation.

What is certified (proof in docs/accounting/local-steps.md):

* S = 1: one additive step per round, no hidden state. The k participants' noise adds up (infinitely
  divisible noise, Heikkilä 2024 Lemma 4.3), so the k-client base is the step with the joint noise.
* S >= 2: the target client's trajectory (u_1, ..., u_S) is an adaptive composition of S Poisson-subsampled
  mechanisms protected by its own per-step noise only (Mironov 2017 Prop. 1; Mironov, Talwar & Zhang 2019
  for the Gaussian; Zhu & Wang 2019 Thm 5 for Skellam / discrete Gaussian). The sum released by secure
  aggregation is a post-processing of that trajectory and of independent other terms, so
  eps_k(a) = S * eps_step,own(a) for every k. The other clients' noise is NOT counted: the local model
  carries the client's own earlier noise, which later gradients can amplify together with the signal
  (counterexample in the docs), so Heikkilä 2024 Thm 4.7's joint-noise composition over S >= 2 local steps
  is not an upper bound in this setting (its auxiliary values may not depend on the client's own noise).

Inside the check-in mixture the target takes part with probability k/n given K = k; amplification is by
joint convexity only (:class:`secagg_dp.accounting.checkin.mixture.SubsampledCheckin` with
``amplification="joint-convexity"``), because Wang, Balle & Kasiviswanathan 2019 Thm 9 needs client-level
replace-one bounds that sample-level clipping does not give. The same formula is exact for an observer who
sees the target's participation (the secure-aggregation server), so for sample-level units the analyst and
the server get the same number.

Neighbouring relation: ``add-remove`` of one sample for q < 1; with q = 1 also ``replace-one``
(sensitivity doubled).

Labelled comparison (never a certificate): :func:`seed004_joint_noise_rdp`, :func:`heterogeneous_gaussian_rdp`
and :func:`table1_comparison` reproduce Heikkilä 2024's joint-noise accounting (Def. 4.2, Lemmas 4.3-4.6,
Thm 4.7, Appendix Eqs. 22-27), which is exact without adaptivity but not an upper bound for S >= 2 when
later steps depend on the client's own earlier noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.bases import DDGSum, SkellamSum
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS
from secagg_dp.accounting.core.subsampling import (
    poisson_subsampled_gaussian_rdp,
    poisson_subsampled_rdp,
    revealed_participation_rdp,
)
from secagg_dp.errors import ParameterError

__all__ = [
    "LocalStep",
    "fuse_steps",
    "sum_dominating_step",
    "LocalStepsGaussian",
    "LocalStepsSkellam",
    "LocalStepsDDG",
    "heterogeneous_gaussian_rdp",
    "SEED004_LABEL",
    "seed004_joint_noise_rdp",
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
    """Fuse a client's steps into ``groups`` consecutive groups (Heikkilä 2024 Appendix, Eqs. 26-27).

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

    Variance sum_i C_i^2 sigma_i^2 / l_i^2, sensitivity max_i C_i / l_i (Heikkilä 2024 Appendix after Eq. 24).
    Sensitivity is per sample under add/remove (double it for replace-one)."""
    if not steps:
        raise ParameterError("Argument 'steps' must be non-empty.")
    var = sum((s.noise_std / s.lr_ratio) ** 2 for s in steps)
    sens = max(s.clip / s.lr_ratio for s in steps)
    return var, sens


def _joint_convexity(q: float, eps: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """1/(a-1) log(1 + q expm1((a-1) eps)): joint convexity of E_Q[(P/Q)^a] (Poisson mixture, add/remove)."""
    return revealed_participation_rdp(eps, q, np.asarray(orders, dtype=np.float64))


def _check_schedule(steps: int, sample_rate: float, neighbouring: str) -> tuple[int, float]:
    """(S, q) after the checks every local-steps mechanism shares: S >= 1 steps, Poisson rate q in (0, 1], and
    the relation (q < 1 with add/remove only)."""
    steps = check_int("steps", steps, lo=1)
    sample_rate = check_probability("sample_rate", sample_rate, allow_zero=False)
    if neighbouring not in ("add-remove", "replace-one"):
        raise ParameterError(f"Argument 'neighbouring' must be 'add-remove' or 'replace-one', not {neighbouring!r}.")
    if neighbouring == "replace-one" and sample_rate < 1.0:
        raise ParameterError("Poisson sampling inside the client (sample_rate < 1) is supported for 'add-remove' only.")
    return steps, sample_rate


def _poisson_discrete(
    step_rdp: Callable[[np.ndarray], np.ndarray], q: float, orders: np.ndarray
) -> npt.NDArray[np.float64]:
    """One Poisson(q)-subsampled step of a discrete base, rows = blocks: min of Zhu & Wang 2019 Thm 5
    (core ``poisson_subsampled_rdp``, add/remove, any base) and joint convexity."""
    orders = np.asarray(orders, dtype=np.int64)
    if q == 1.0:
        return step_rdp(orders)
    jmax = int(orders.max())
    table = np.zeros((step_rdp(orders[:1]).shape[0], jmax + 1))
    table[:, 2:] = step_rdp(np.arange(2, jmax + 1))
    zw = poisson_subsampled_rdp(table, q, orders)
    result: npt.NDArray[np.float64] = np.minimum(zw, _joint_convexity(q, table[:, orders], orders))
    return result


@dataclass(frozen=True)
class LocalStepsGaussian:
    """k clients x S local steps, per-client per-step noise std sigma*C, Poisson rate q inside each client.

    Sound upper bound (module docstring): S = 1 -> eps_step(a; z_k) with the k clients' joint noise,
    z_k = sqrt(k) sigma / s; S >= 2 -> S * eps_step(a; z_1), the client's own noise z_1 = sigma / s
    (adaptive composition, Mironov 2017 Prop. 1). s = 1 (add-remove) or 2 (replace-one, q = 1 only);
    eps_step is exact MTZ19 (Mironov, Talwar & Zhang 2019) for q < 1, Mironov 2017 Prop. 7 for q = 1.
    Non-increasing in k."""

    sigma: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        check_real("sigma", self.sigma, lo=0.0, lo_open=True)
        _check_schedule(self.steps, self.sample_rate, self.neighbouring)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        sens = 2.0 if self.neighbouring == "replace-one" else 1.0
        k_noise = k if self.steps == 1 else np.ones_like(k)  # S >= 2: own noise only
        z = np.sqrt(k_noise) * self.sigma / sens
        return self.steps * poisson_subsampled_gaussian_rdp(z, self.sample_rate, np.asarray(orders, dtype=np.float64))


@dataclass(frozen=True)
class LocalStepsSkellam:
    """k clients x S steps of Skellam noise (variance v per client per step, grid units), sensitivities in
    grid units per sample (add/remove; pass doubled ones for replace-one, q = 1 only).

    Sound upper bound: S = 1 -> the step with the k clients' joint variance k v (Lemma 4.3 of Heikkilä 2024,
    Skellam bound of Agarwal, Kairouz & Liu 2021); S >= 2 -> S times the step with the client's own
    variance v (Mironov 2017 Prop. 1). q < 1: Zhu & Wang 2019 Thm 5, capped by joint convexity."""

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        _check_schedule(self.steps, self.sample_rate, self.neighbouring)
        SkellamSum(self.variance, self.l2_sensitivity, self.l1_sensitivity)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        base = SkellamSum(self.variance, self.l2_sensitivity, self.l1_sensitivity)
        k = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        k_noise = k if self.steps == 1 else np.ones_like(k)
        return self.steps * _poisson_discrete(lambda o: base.rdp_upper(k_noise, k_noise, o), self.sample_rate, orders)


@dataclass(frozen=True)
class LocalStepsDDG:
    """k clients x S steps of distributed discrete Gaussian noise N_Z(0, sigma^2) per client per step.

    Sound upper bound: S = 1 -> Kairouz, Liu & Steinke 2021 for the k-client sum (:class:`DDGSum`);
    S >= 2 -> S times the same bound for one client's own noise (k = 1; Mironov 2017 Prop. 1).
    q < 1: Zhu & Wang 2019 Thm 5, capped by joint convexity."""

    sigma: float
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float
    steps: int
    sample_rate: float = 1.0
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        _check_schedule(self.steps, self.sample_rate, self.neighbouring)
        DDGSum(self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity)

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        base = DDGSum(self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity)
        k_lo = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        k_hi = np.atleast_1d(np.asarray(k_hi, dtype=np.float64))
        if self.steps >= 2:
            k_lo = k_hi = np.ones_like(k_lo)
        return self.steps * _poisson_discrete(lambda o: base.rdp_upper(k_lo, k_hi, o), self.sample_rate, orders)


#: The literal ``bound`` label of Heikkilä 2024's joint-noise composition over S >= 2 steps (JSON value).
SEED004_LABEL = "seed-004 (not an upper bound)"


def seed004_joint_noise_rdp(
    sigma: float, steps: int, sample_rate: float, k: np.ndarray, orders: np.ndarray, neighbouring: str = "add-remove"
) -> np.ndarray:
    """COMPARISON ONLY, not an upper bound for S >= 2: Heikkilä 2024 Thm 4.7 with Lemma 4.3, i.e.
    S * eps_step(a; sqrt(k) sigma / s) with the k clients' joint noise at every step (Gaussian, MTZ19).

    Exact for non-adaptive steps; beaten when later steps depend on the client's own earlier noise
    (docs/accounting/local-steps.md). Rows: the entries of ``k``."""
    check_real("sigma", sigma, lo=0.0, lo_open=True)
    steps, q = _check_schedule(steps, sample_rate, neighbouring)
    sens = 2.0 if neighbouring == "replace-one" else 1.0
    z = np.sqrt(np.atleast_1d(np.asarray(k, dtype=np.float64))) * sigma / sens
    return steps * poisson_subsampled_gaussian_rdp(z, q, np.asarray(orders, dtype=np.float64))


def heterogeneous_gaussian_rdp(
    clients: Sequence[Sequence[LocalStep]], sample_rate: float, orders: np.ndarray, *, common_steps: int | None = None
) -> np.ndarray:
    """COMPARISON ONLY for S >= 2 (``SEED004_LABEL``): Heikkilä 2024's joint-noise RDP (add/remove, one
    sample) of one round with heterogeneous clients (fixed participants); an upper bound only when every
    client runs one step (common_steps = 1) or the steps are non-adaptive.

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


def local_steps_epsilon(
    noise_multiplier: float, steps: int, sample_rate: float, delta: float, rounds: int = 1
) -> float:
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
    parties: Sequence[int] = (1, 2, 5, 10),
    step_counts: Sequence[int] = (1, 10, 50),
    sample_rate: float = 0.1,
    epsilon: float = 5.0,
    delta: float = 1e-5,
) -> list[dict[str, Any]]:
    """Heikkilä 2024 Table 1 with our RDP arithmetic: calibrate sigma_LDP for one party (eps = 5,
    delta = 1e-5, add/remove, Poisson 0.1; 1 step, 1 epoch = 10 steps, 5 epochs = 50 steps), then average N
    models: joint noise sigma_total = sqrt(N) sigma_LDP (Thm 4.7 / Lemma 4.3), same S steps.

    A reproduction, not a certificate: rows with S >= 2 and N >= 2 carry ``bound`` = ``SEED004_LABEL``
    and ``certificate`` = False (the sound bound for them is the one-party value, N = 1)."""
    rows = []
    for s in step_counts:
        z = calibrate_local_sigma(epsilon, s, sample_rate, delta)
        for n in parties:
            zt = math.sqrt(n) * z
            sound = s == 1 or n == 1
            rows.append(
                {
                    "steps": s,
                    "parties": n,
                    "sigma_total": zt,
                    "epsilon": local_steps_epsilon(zt, s, sample_rate, delta),
                    "bound": "joint noise, one step" if s == 1 else ("own noise" if n == 1 else SEED004_LABEL),
                    "certificate": sound,
                }
            )
    return rows
