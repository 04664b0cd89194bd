"""``privacy.target_epsilon``: the simulator picks its own noise multiplier before round 1.

The certificate is the simulator's own (:mod:`simulations.privacy`): the check-in mixture of the planned
``rounds`` at ``privacy.delta`` for the observer ``privacy.observer`` (``"analyst"``: sees K and the aggregate;
``"server"``: also who took part and who dropped; ``"coalition"``: an active server with
``secagg.corrupt_clients`` colluding clients and sums down to :func:`simulations.privacy.coalition_min_sum`),
with the configured method, dropouts, noise enforcement, unit and local steps. The codec scale is recomputed
for every candidate z (:func:`simulations.runner.plan`), so the certificate is the one the run will report.

Search: more noise gives a smaller Renyi divergence of every base mechanism at a fixed codec, so epsilon(z)
decreases in z as long as the codec scale is set by the clients' signal; where the bit width binds, the scale
rule shrinks the grid as z grows and rounding inflates the sensitivity, so epsilon(z) need not be monotone
there. The search keeps the invariant "lo misses the target, hi meets it" (both evaluated): it walks from the
configured z by factors of 4 to a bracket, then bisects on log z until hi - lo <= :data:`REL_TOL` hi. The
returned z = hi is always an evaluated z whose certificate is <= the target, and an evaluated z' >=
z (1 - REL_TOL) misses it (unless z = :data:`Z_MIN`, which is returned when it meets the target); where
epsilon(z) is monotone this z is the smallest in the range to that tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from secagg_dp.errors import ConfigError, ParameterError, PrivacyBudgetExceeded
from simulations.config import NO_NOISE, SimConfig

__all__ = ["Calibration", "calibrate", "calibrate_noise", "planned_epsilon", "Z_MIN", "Z_MAX", "REL_TOL"]

#: The range of noise multipliers searched: below Z_MIN the noise is negligible (any target it meets, Z_MIN meets
#: too, and Z_MIN is returned); above Z_MAX (or where the samplers' cap refuses the plan) a target is unreachable.
Z_MIN = 1e-3
Z_MAX = 1e4
#: Relative tolerance of the bisection: the returned z meets the target and an evaluated z' >= z (1 - REL_TOL) misses.
REL_TOL = 1e-3
_STEP = 4.0  # bracket expansion factor


@dataclass(frozen=True)
class Calibration:
    """The outcome of :func:`calibrate`: the target, the chosen noise multiplier and its certificate."""

    target_epsilon: float
    observer: str
    noise_multiplier: float  # the chosen z: its certificate meets the target
    epsilon: float  # the certificate of the chosen z (<= target_epsilon)
    delta: float
    rounds: int
    configured_noise_multiplier: float  # privacy.noise_multiplier as configured (the search's starting point)
    evaluations: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_epsilon": self.target_epsilon,
            "observer": self.observer,
            "noise_multiplier": self.noise_multiplier,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rounds": self.rounds,
            "configured_noise_multiplier": self.configured_noise_multiplier,
            "relative_tolerance": REL_TOL,
            "evaluations": self.evaluations,
        }


def _with_z(cfg: SimConfig, z: float) -> SimConfig:
    return replace(cfg, privacy=replace(cfg.privacy, noise_multiplier=float(z)))


#: The run's planning function, :func:`simulations.runner.plan` (passed in: the runner calls this module)
Planner = Callable[[SimConfig, int, Any], Any]


def planned_epsilon(cfg: SimConfig, observer: str, root_seed: int, task: Any, planner: Planner) -> float:
    """The certificate the run's accountant (:class:`simulations.privacy.SimAccountant`, or
    :class:`~simulations.privacy.RandomCheckinSimAccountant` for random check-ins) reports for ``observer`` after
    ``cfg.rounds`` rounds at ``privacy.delta`` (``planned_epsilon`` of results.json's ``privacy``, ``privacy.server`` or
    ``privacy.coalition``), for ``cfg`` as given. inf where no finite certificate exists.

    ``planner`` is :func:`simulations.runner.plan`. Raises ConfigError when the plan itself is refused (e.g. the
    bit width or the samplers' cap)."""
    from simulations.privacy import RandomCheckinSimAccountant, SimAccountant

    p = planner(cfg, root_seed, task)
    # the accountant that certifies the run (simulations.privacy.make_accountant): random check-ins or the coin
    acc = RandomCheckinSimAccountant if cfg.population.participation == "random-checkin" else SimAccountant
    try:
        return acc.planned_epsilon_for(cfg, p, observer)
    except ParameterError:  # the method cannot certify the planned rounds at this noise: no finite epsilon
        return math.inf


_CACHE: dict[str, tuple[SimConfig, Calibration]] = {}  # repr of (cfg, seed, task) -> result: study.run checks
_CACHE_SIZE = 64  # every variant before any work, then run_scenario asks again


def calibrate(
    cfg: SimConfig, root_seed: int = 0, task: Any = None, *, planner: Planner
) -> tuple[SimConfig, Calibration]:
    """:func:`calibrate_noise`, remembered for the last few configs (the search is deterministic)."""
    key = repr((cfg, root_seed, None if task is None else id(task), planner))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = calibrate_noise(cfg, root_seed, task, planner=planner)
    return _CACHE[key]


def calibrate_noise(
    cfg: SimConfig, root_seed: int = 0, task: Any = None, *, planner: Planner
) -> tuple[SimConfig, Calibration]:
    """The smallest noise multiplier z in [Z_MIN, Z_MAX] whose certificate for ``privacy.observer`` after the
    planned rounds is <= ``privacy.target_epsilon`` (to relative tolerance :data:`REL_TOL`, bisection on log z),
    and ``cfg`` with ``privacy.noise_multiplier`` = z.

    ``privacy.target_epsilon`` wins over ``privacy.noise_multiplier``: the configured z is only where the search
    starts (a z already calibrated is confirmed with two evaluations). ``planner``: :func:`simulations.runner.plan`.
    Raises ConfigError naming ``privacy.target_epsilon`` when no z in the range (or none the samplers accept)
    meets the target."""
    priv = cfg.privacy
    target = priv.target_epsilon
    if target is None:
        raise ConfigError("Config key 'privacy.target_epsilon' must be set to calibrate the noise, not None.")
    if priv.mechanism == NO_NOISE:
        raise ConfigError("Config key 'privacy.target_epsilon' cannot be met with privacy.mechanism = 'none'.")
    observer = priv.observer
    cache: dict[float, float] = {}
    refused: list[str] = []

    def eps(z: float) -> float:
        if z not in cache:
            try:
                cache[z] = planned_epsilon(_with_z(cfg, z), observer, root_seed, task, planner)
            except (ConfigError, ParameterError) as exc:  # the plan refuses this z (too much noise for the cap)
                refused.append(str(exc))
                cache[z] = math.nan
        return cache[z]

    def meets(z: float) -> bool:
        e = eps(z)
        return not math.isnan(e) and e <= target

    def unreachable(why: str) -> ConfigError:
        return ConfigError(
            f"Config key 'privacy.target_epsilon' = {target:g} cannot be met for observer {observer!r} after "
            f"{cfg.rounds} rounds at delta = {priv.delta:g}: {why}. To fix, raise the target, use fewer rounds, "
            "raise population.clients or population.checkin, or choose a weaker observer."
        )

    z0 = min(max(float(priv.noise_multiplier), Z_MIN), Z_MAX)
    while math.isnan(eps(z0)):  # the configured z is refused (too much noise for the samplers): start lower
        if z0 <= Z_MIN:
            raise unreachable(f"no noise multiplier >= {Z_MIN:g} gives a plan ({refused[-1]})")
        z0 = max(z0 / _STEP, Z_MIN)
    if meets(z0):
        hi = z0
        lo = hi / (1.0 + REL_TOL)
        if meets(lo):  # not calibrated yet: walk down to a z that misses the target
            hi = lo
            while True:
                lo = max(hi / _STEP, Z_MIN)
                if not meets(lo):
                    break
                hi = lo
                if lo <= Z_MIN:
                    return _done(cfg, hi, eps(hi), len(cache))
    else:
        lo = z0
        while True:
            if math.isnan(eps(lo)):  # the samplers' cap refused this much noise: larger z is refused too
                best = min((e for e in cache.values() if not math.isnan(e)), default=math.inf)
                raise unreachable(f"the noise the samplers accept gives at best epsilon = {best:.6g} ({refused[-1]})")
            if lo >= Z_MAX:
                raise unreachable(f"even noise multiplier {Z_MAX:g} gives epsilon = {eps(lo):.6g}")
            hi = min(lo * _STEP, Z_MAX)
            if meets(hi):
                break
            if math.isnan(eps(hi)):  # between lo and the refused hi: bisect for the largest accepted z first
                hi = _largest_accepted(lo, hi, eps)
                if meets(hi):
                    break
                best = eps(hi)
                raise unreachable(f"the noise the samplers accept gives at best epsilon = {best:.6g} ({refused[-1]})")
            lo = hi
    while hi - lo > REL_TOL * hi:  # invariant: lo misses the target, hi meets it
        mid = math.sqrt(lo * hi)
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return _done(cfg, hi, eps(hi), len(cache))


def _largest_accepted(lo: float, hi: float, eps: Any) -> float:
    """The largest z in [lo, hi) the plan accepts (eps not NaN), to relative tolerance REL_TOL."""
    while hi - lo > REL_TOL * hi:
        mid = math.sqrt(lo * hi)
        if math.isnan(eps(mid)):
            hi = mid
        else:
            lo = mid
    return lo


def _done(cfg: SimConfig, z: float, e: float, evaluations: int) -> tuple[SimConfig, Calibration]:
    priv = cfg.privacy
    if priv.target_epsilon is None or not e <= priv.target_epsilon:  # the invariant: z meets the target
        # checked, not asserted: under `python -O` an assert would vanish and an unmet target pass silently
        raise PrivacyBudgetExceeded(
            f"Calibration ended at noise multiplier {z:g} with certified epsilon {e:g}, above "
            f"privacy.target_epsilon = {priv.target_epsilon}: refusing to run with it."
        )
    cal = Calibration(
        target_epsilon=priv.target_epsilon,
        observer=priv.observer,
        noise_multiplier=z,
        epsilon=e,
        delta=priv.delta,
        rounds=cfg.rounds,
        configured_noise_multiplier=float(priv.noise_multiplier),
        evaluations=evaluations,
    )
    return _with_z(cfg, z), cal
