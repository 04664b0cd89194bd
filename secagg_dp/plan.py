"""A round's DP plan and its noise mechanism, as two frozen values computed once from the public parameters.

:class:`Mechanism` is the per-client noise on the integer grid, ``"ddg"`` (distributed discrete Gaussian,
Kairouz, Liu & Steinke 2021; sampler of Canonne, Kamath & Steinke 2020) or ``"skellam"`` (symmetric Skellam,
Agarwal, Kairouz & Liu 2021): its draw and the k-client base mechanism the check-in accountant evaluates.

:class:`DPPlan` is what every client and the server derive before a round from (clip C, noise multiplier z,
expected clients K_exp, bits b, dimension d, k_stddevs, beta, mechanism): each client's noise std in model units
sigma_local = z C / sqrt(K_exp) (so the K_exp clients' noise sums to std z C), the codec scale s of the
k-stddev rule (:meth:`secagg_dp.quantize.ZqCodec.scale_for`, Kairouz, Liu & Steinke 2021 Sec. 4) capped to the
samplers' range (:func:`secagg_dp.quantize.scale.sampler_capped_scale`), the grid std sigma_int = s sigma_local
and the codec's sensitivities Delta_2, Delta_1 of one encoded vector (add-remove of one client). The simulator
(``simulations.runner.plan``) and the Flower path (``simulations.flower.core.FlowerDPConfig``) both stand on it.

Not :class:`protocols.pool.RoundPlan`, which is the masking protocol's configuration of a round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from secagg_dp import zq
from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ParameterError
from secagg_dp.noise import SIGMA_MAX
from secagg_dp.quantize.scale import DEFAULT_BETA

if TYPE_CHECKING:
    from secagg_dp.accounting.checkin.mixture import BaseMechanism
    from secagg_dp.quantize import ZqCodec

__all__ = ["MECHANISMS", "Mechanism", "DPPlan", "SIGMA_INT_MAX"]

#: The grid noise mechanisms of a round.
MECHANISMS = ("ddg", "skellam")

#: Largest per-client grid noise std: the range of ``sample_discrete_gaussian`` (sigma in (0, 1e6]) and of
#: ``sample_skellam`` (variance in (0, 1e12]).
SIGMA_INT_MAX = SIGMA_MAX

_TINY = 5e-324  # a variance that underflows to 0 becomes the smallest positive double: less noise, larger epsilon


@dataclass(frozen=True)
class Mechanism:
    """The per-client grid noise of a round: ``name`` ``"ddg"`` or ``"skellam"`` (:data:`MECHANISMS`)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in MECHANISMS:
            raise ParameterError(f"Argument 'mechanism' must be one of {MECHANISMS}, not {self.name!r}.")

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        """Equal to the same mechanism and to its name (``Mechanism("ddg") == "ddg"``), so that code still
        comparing the config's string does not get a silent False."""
        if isinstance(other, Mechanism):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def infinitely_divisible(self) -> bool:
        """True for Skellam (a sum of independent symmetric Skellam variables is one, Skellam 1946), False for
        the discrete Gaussian (a sum of discrete Gaussians is not one): add-then-remove needs True."""
        return self.name == "skellam"

    def draw(self, sigma_int: float, size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """One client's int64 noise: discrete Gaussian N_Z(0, sigma^2) (Canonne, Kamath & Steinke 2020) or
        symmetric Skellam of variance sigma^2 (Agarwal, Kairouz & Liu 2021), ``size`` values."""
        from secagg_dp.noise import sample_discrete_gaussian, sample_skellam

        if self.name == "ddg":
            return np.asarray(sample_discrete_gaussian(sigma_int, size, rng=rng), dtype=np.int64)
        return np.asarray(sample_skellam(sigma_int**2, size, rng=rng), dtype=np.int64)

    def sum_base(self, sigma: float, dim: int, l2_sensitivity: float, l1_sensitivity: float) -> BaseMechanism:
        """The k-client base of the check-in accountant: the sum of k clients' vectors, each with this noise of
        grid std ``sigma``, at the given sensitivities of the SUM (the caller doubles one client's bounds for
        replace-one): ``DDGSum`` (Kairouz, Liu & Steinke 2021 Thm 12 via Canonne, Kamath & Steinke 2020) or
        ``SkellamSum`` (Agarwal, Kairouz & Liu 2021 Thm 3.5)."""
        from secagg_dp.accounting.checkin.bases import DDGSum, SkellamSum

        if self.name == "skellam":
            return SkellamSum(max(sigma * sigma, _TINY), l2_sensitivity, l1_sensitivity)
        return DDGSum(sigma, dim, l2_sensitivity, l1_sensitivity)

    def local_steps_base(
        self, sigma: float, dim: int, l2_sensitivity: float, l1_sensitivity: float, steps: int, sample_rate: float
    ) -> BaseMechanism:
        """The k-client base of ``steps`` local steps with Poisson rate ``sample_rate`` inside each client and one
        sample's sensitivities (``LocalStepsDDG`` / ``LocalStepsSkellam``, docs/accounting/local-steps.md)."""
        from secagg_dp.accounting.checkin.local_steps import LocalStepsDDG, LocalStepsSkellam

        if self.name == "skellam":
            return LocalStepsSkellam(max(sigma * sigma, _TINY), l2_sensitivity, l1_sensitivity, steps, sample_rate)
        return LocalStepsDDG(sigma, dim, l2_sensitivity, l1_sensitivity, steps, sample_rate)


@dataclass(frozen=True)
class DPPlan:
    """A round's DP plan, computed once at construction (validated; ParameterError naming the argument).

    Inputs: ``clip`` C (L2, of one client's vector or one sample), ``noise_multiplier`` z, ``expected_clients``
    K_exp (the noise of K_exp clients sums to std z C), ``bits`` of q = 2^bits, ``dim`` d, ``k_stddevs`` and
    ``beta`` of the scale rule, ``mechanism``; ``scale_clients`` (default ceil(K_exp)): the number of clients
    whose sum must fit in Z_q; ``signal_norm`` (default C): the per-client L2 norm the scale budgets for (S q m C
    for sample-level local steps); ``local_steps`` S: a client adds S noise shares (budgeted as std
    sigma_local sqrt(S)).

    Derived: ``sigma_local`` = z C / sqrt(K_exp); ``scale_rule`` = the k-stddev scale
    (:meth:`~secagg_dp.quantize.ZqCodec.scale_for` over ``scale_clients`` clients of norm ``signal_norm`` and
    noise std sigma_local sqrt(S)); ``scale`` = it capped so that sigma_local * scale <= :data:`SIGMA_INT_MAX`
    (``scale_capped`` says whether the cap applied; a cap whose rounding inflates Delta_2 above x2 is refused,
    the criterion ``scale_for`` applies uncapped); ``sigma_int`` = min(sigma_local scale, SIGMA_INT_MAX);
    ``padded_dim``, ``l2_sensitivity``, ``l1_sensitivity``: the codec's (one encoded vector, add-remove).

    Refusals: a bit width the scale rule cannot use raises ParameterError naming ``'bits'``, chained from the
    scale rule's own error (its ``__cause__``, which callers may quote); a noise multiplier whose capped scale
    inflates Delta_2 above x2 raises ParameterError naming ``'noise_multiplier'``.
    """

    clip: float
    noise_multiplier: float
    expected_clients: float
    bits: int
    dim: int
    k_stddevs: float = 4.0
    beta: float = DEFAULT_BETA
    mechanism: Mechanism = Mechanism("ddg")
    scale_clients: int | None = None
    signal_norm: float | None = None
    local_steps: int = 1
    sigma_local: float = field(init=False)
    scale_rule: float = field(init=False)
    scale: float = field(init=False)
    scale_capped: bool = field(init=False)
    sigma_int: float = field(init=False)
    padded_dim: int = field(init=False)
    l2_sensitivity: float = field(init=False)
    l1_sensitivity: float = field(init=False)

    def __post_init__(self) -> None:
        from secagg_dp.quantize import ZqCodec
        from secagg_dp.quantize.scale import sampler_capped_scale

        clip = check_real("clip", self.clip, lo=0.0, lo_open=True)
        z = check_real("noise_multiplier", self.noise_multiplier, lo=0.0, lo_open=True)
        k_exp = check_real("expected_clients", self.expected_clients, lo=0.0, lo_open=True)
        zq.check_bits(self.bits, "bits")
        dim = check_int("dim", self.dim, lo=1)
        check_real("k_stddevs", self.k_stddevs, lo=0.0, lo_open=True)
        if not isinstance(self.mechanism, Mechanism):
            raise ParameterError(f"Argument 'mechanism' must be a Mechanism, not {type(self.mechanism).__name__}.")
        steps = check_int("local_steps", self.local_steps, lo=1)
        n_scale = (
            math.ceil(k_exp) if self.scale_clients is None else check_int("scale_clients", self.scale_clients, lo=1)
        )
        signal = clip if self.signal_norm is None else check_real("signal_norm", self.signal_norm, lo=0.0, lo_open=True)
        sigma_local = z * clip / math.sqrt(k_exp)
        sigma_total = sigma_local if steps == 1 else sigma_local * math.sqrt(steps)
        try:
            scale = ZqCodec.scale_for(
                bits=self.bits,
                n_clients=n_scale,
                clip=signal,
                dim=dim,
                sigma=sigma_total,
                k=self.k_stddevs,
                beta=self.beta,
            )
        except ParameterError as exc:
            raise ParameterError(
                f"Argument 'bits' = {self.bits} is too small for {n_scale} clients of dimension {dim}: {exc}"
            ) from exc
        scale_rule = scale
        scale, inflation = sampler_capped_scale(
            scale, sigma=sigma_local, clip=clip, dim=dim, beta=self.beta, sigma_int_max=SIGMA_INT_MAX
        )
        if inflation is not None and inflation > 2.0:  # the criterion ZqCodec.scale_for applies uncapped
            raise ParameterError(
                f"Argument 'noise_multiplier' = {z:g} is too large for the samplers: the grid noise std is capped "
                f"at {SIGMA_INT_MAX:g}, which leaves scale {scale:.4g} and rounding inflates the L2 sensitivity by "
                f"x{inflation:.3g} (> 2). To fix, lower the noise multiplier or clip."
            )
        codec = self._codec(scale)
        for name, value in (
            ("sigma_local", sigma_local),
            ("scale_rule", scale_rule),
            ("scale", float(scale)),
            ("scale_capped", inflation is not None),
            ("sigma_int", min(sigma_local * scale, SIGMA_INT_MAX)),
            ("padded_dim", int(codec.padded_dim)),
            ("l2_sensitivity", float(codec.l2_sensitivity)),
            ("l1_sensitivity", float(codec.l1_sensitivity)),
        ):
            object.__setattr__(self, name, value)

    def _codec(self, scale: float) -> ZqCodec:
        from secagg_dp.quantize import ZqCodec

        return ZqCodec(self.dim, self.bits, self.clip, scale, rotation_seed=0, beta=self.beta)

    @property
    def codec(self) -> ZqCodec:
        """The plan's Z_q codec with the public rotation seed 0 (another seed gives the same sensitivities)."""
        return self._codec(self.scale)

    @property
    def budget_clients(self) -> int:
        """The number of clients the scale budgets for (``scale_clients``, default ceil(K_exp))."""
        return math.ceil(self.expected_clients) if self.scale_clients is None else self.scale_clients

    @property
    def budget_norm(self) -> float:
        """The per-client L2 norm the scale budgets for (``signal_norm``, default ``clip``)."""
        return self.clip if self.signal_norm is None else self.signal_norm

    @property
    def budget_sigma(self) -> float:
        """The per-client noise std the scale budgets for, sigma_local sqrt(S)."""
        return self.sigma_local if self.local_steps == 1 else self.sigma_local * math.sqrt(self.local_steps)

    def wrap_probability(self) -> float:
        """P(some coordinate of the aggregate wraps) for the budgeted clients, signal and noise (the codec's
        sub-Gaussian bound, :func:`secagg_dp.quantize.wrap_around_bound`)."""
        from secagg_dp.quantize import wrap_around_bound

        return float(
            wrap_around_bound(
                bits=self.bits,
                scale=self.scale,
                clip=self.budget_norm,
                dim=self.dim,
                n_clients=self.budget_clients,
                sigma=self.budget_sigma,
                beta=self.beta,
            ).any_coordinate
        )

    def enforced_target_variance(self) -> float:
        """mu: the target noise variance of the sum on the grid for add-then-remove enforcement,
        K_exp sigma_int^2 (what the expected clients' noise adds without enforcement)."""
        return float(self.expected_clients * self.sigma_int**2)
