"""Choosing the scale s from a bit budget, and bounding the probability of modular wrap-around.

[KLS21] = Kairouz, Liu & Steinke 2021, "The distributed discrete Gaussian mechanism for federated learning
with secure aggregation", arXiv:2102.06387 v4. [CKS20] = Canonne, Kamath & Steinke 2020, "The discrete
Gaussian for differential privacy", arXiv:2004.00010.

Model of one coordinate j of the aggregate on the integer grid (n clients, padded dimension d, clip c,
scale s, per-client noise std σ in ORIGINAL units, i.e. s·σ on the grid):

    A_j = (R·Σ_i s·x_i)_j  +  Σ_i e_ij  +  Σ_i z_ij
          signal             rounding     noise

- signal: with the shared random rotation R = H·D and ‖Σ_i s·x_i‖₂ ≤ n·c·s, A_j's signal part is
  sub-Gaussian with variance proxy n²c²s²/d (Hoeffding over the Rademacher signs; [KLS21] Sec. 4.2,
  Lemma 29 with flatness ρ = 1). Assumes the inputs do not depend on the public rotation seed.
- rounding: e_ij lies in an interval of length 1, so e_ij − E[e_ij] is 1/4-sub-Gaussian (Hoeffding's lemma)
  and clients are independent: proxy n/4. Unconditional rounding (β = 0) is unbiased. Conditional rounding
  (β > 0) conditions on an event of probability ≥ 1 − β, which biases each e_ij by at most
  sqrt(β·1/4)/(1 − β) (Cauchy–Schwarz on E[e·1{rejected}], since E[e] = 0 and E[e²] ≤ 1/4).
- noise: the discrete Gaussian N_Z(0, (sσ)²) is (sσ)²-sub-Gaussian ([CKS20] Corollary 9): proxy n·s²σ².
  (This bound does not cover Skellam noise, which is only sub-exponential.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ParameterError
from secagg_dp.quantize.hadamard import next_pow2
from secagg_dp.quantize.rounding import rounded_l2_bound
from secagg_dp.zq import check_bits

__all__ = ["DEFAULT_BETA", "MAX_CLIP_SCALE", "scale_for", "sampler_capped_scale", "WrapBound", "wrap_around_bound"]

#: [KLS21] default conditional-rounding parameter (also the default of their released code).
DEFAULT_BETA = math.exp(-0.5)

#: Largest c·s accepted: rounded coordinates (|x̃_j| ≤ c·s + 1) must fit in int64 with room to spare.
MAX_CLIP_SCALE = float(2**61)


def scale_for(
    *,
    bits: int,
    n_clients: int,
    clip: float,
    dim: int,
    sigma: float,
    k: float = 4.0,
    beta: float = DEFAULT_BETA,
    max_inflation: float = 2.0,
) -> float:
    """The "k standard deviations fit in Z_q" scale of [KLS21] Sec. 4.4 (Theorem 34 / Eq. 61 heuristic).

    Solve 2^b = 2k·sqrt(c²n²/d + (1/(4s²) + σ²)·n)·s for s (the sub-Gaussian proxy of the module
    docstring, in original units, times s, must have k std devs within ±q/2):

        s = sqrt(2^{2b} − n·k²) / (2k · sqrt(c²n²/d + n·σ²))

    with d the PADDED dimension (next power of two ≥ ``dim``), as in the released code of [KLS21]
    (google-research/federated, ``distributed_dp/accounting_utils.py::heuristic_scale_factor``, whose
    ``dim`` "includes any necessary padding"), and σ the per-client noise std in original units.

    Refuses infeasible budgets instead of returning a meaningless scale (google-research/federated #66):

    1. 2^{2b} ≤ n·k²: even the rounding noise alone does not fit in k std devs.
    2. Quantisation dominates the signal: Δ₂(c·s)/(c·s) > ``max_inflation``, where Δ₂ is the post-rounding
       L2 bound (:func:`rounded_l2_bound`). Δ₂/(c·s) is exactly the factor by which rounding inflates the
       L2 sensitivity, hence the DP noise std needed for the same privacy; the default 2 refuses a scale
       at which quantisation more than doubles the noise required. (Our criterion; [KLS21] state none.)

    Departure: s is capped at 2^61/c so rounded coordinates fit in int64 (only reachable with b ≳ 58).
    """
    bits = check_bits(bits)
    n = check_int("n_clients", n_clients, lo=1)
    c = check_real("clip", clip, lo=0.0, lo_open=True)
    d = next_pow2(check_int("dim", dim, lo=1))
    sigma = check_real("sigma", sigma, lo=0.0)
    k = check_real("k", k, lo=0.0, lo_open=True)
    beta = check_real("beta", beta, lo=0.0, hi=1.0, hi_open=True)
    max_inflation = check_real("max_inflation", max_inflation, lo=1.0, lo_open=True)

    range_sq = 2.0 ** (2 * bits)
    if range_sq <= n * k * k:
        need = math.floor(0.5 * math.log2(n * k * k)) + 1
        raise ParameterError(
            f"Infeasible bit budget: 2^(2·bits) = 2^{2 * bits} must exceed n_clients·k² = {n * k * k:.6g} "
            f"(bits={bits}, n_clients={n}, k={k:g}). To fix, use bits >= {need}, fewer clients per "
            "aggregate, or a smaller k."
        )
    s = math.sqrt(range_sq - n * k * k) / (2.0 * k * math.sqrt(c * c * n * n / d + n * sigma * sigma))
    s = min(s, MAX_CLIP_SCALE / c)
    cs = c * s
    inflation = rounded_l2_bound(cs, d, beta) / cs
    if inflation > max_inflation:
        raise ParameterError(
            f"Scale too small to carry signal: bits={bits}, n_clients={n}, clip={c:g}, dim={dim} "
            f"(padded {d}), sigma={sigma:g}, k={k:g} give scale={s:.6g}, so a clipped vector has norm "
            f"c·s={cs:.6g} on the integer grid and rounding inflates the L2 sensitivity by ×{inflation:.3g} "
            f"(> max_inflation={max_inflation:g}). To fix, increase bits (each bit doubles the scale), "
            "reduce n_clients, k, sigma or dim, or accept more inflation with a larger max_inflation."
        )
    return s


def sampler_capped_scale(
    scale: float, *, sigma: float, clip: float, dim: int, beta: float, sigma_int_max: float
) -> tuple[float, float | None]:
    """Cap the scale so that the grid noise std s·σ stays within the samplers' range ``sigma_int_max``.

    Returns (s', inflation): s' = min(s, sigma_int_max / σ), and, when the cap applies, the rounding
    inflation Δ₂(c·s')/(c·s') of the L2 sensitivity (the criterion :func:`scale_for` applies to an uncapped
    scale; the caller decides what to refuse), else None. At wide bit widths the k-stddev rule asks for far
    more than the samplers take (6e16 at b = 62); beyond that std the rounding error (variance ≤ 1/4 per
    coordinate per client) is negligible against the noise, so a larger scale buys no utility. A smaller
    scale only lowers the wrap-around probability; codec, sensitivities and accountant use s'.
    """
    if sigma * scale <= sigma_int_max:
        return scale, None
    capped = sigma_int_max / sigma
    return capped, rounded_l2_bound(clip * capped, next_pow2(dim), beta) / (clip * capped)


@dataclass(frozen=True)
class WrapBound:
    """Upper bounds on modular wrap-around of the aggregate (see :func:`wrap_around_bound`)."""

    per_coordinate: float  # P(|A_j| ≥ q/2) for any fixed coordinate j
    any_coordinate: float  # P(some coordinate wraps), union bound over the d padded coordinates
    expected_wrapped: float  # E[number of wrapped coordinates] ≤ d · per_coordinate
    std_proxy: float  # sqrt of the total sub-Gaussian variance proxy V (grid units)
    bias_bound: float  # bound B on |E[Σ_i e_ij]| from conditional rounding (0 when β = 0)


def wrap_around_bound(
    *,
    bits: int,
    scale: float,
    clip: float,
    dim: int,
    n_clients: int,
    sigma: float = 0.0,
    beta: float = DEFAULT_BETA,
) -> WrapBound:
    """Upper bound on the probability that the aggregate of ``n_clients`` encodings wraps around Z_q.

    Decoding is exact (no wrap) iff every A_j lies in [−q/2, q/2). With V = n²c²s²/d + n/4 + n·s²σ² and
    B = n·sqrt(β)/(2(1 − β)) (module docstring), the sub-Gaussian (Chernoff) tail bound gives

        P(|A_j| ≥ q/2) ≤ 2·exp(−(q/2 − B)² / (2V))      (trivially 1 if q/2 ≤ B),

    and a union bound over the d padded coordinates bounds P(any wrap). ``sigma`` is the per-client
    discrete Gaussian std in original units (0 for no noise); d is the padded dimension.
    """
    bits = check_bits(bits)
    s = check_real("scale", scale, lo=0.0, lo_open=True)
    c = check_real("clip", clip, lo=0.0, lo_open=True)
    d = next_pow2(check_int("dim", dim, lo=1))
    n = check_int("n_clients", n_clients, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0)
    beta = check_real("beta", beta, lo=0.0, hi=1.0, hi_open=True)
    v = n * n * c * c * s * s / d + n / 4.0 + n * s * s * sigma * sigma
    bias = n * math.sqrt(beta) / (2.0 * (1.0 - beta))
    t = 2.0 ** (bits - 1) - bias
    per = 1.0 if t <= 0 else min(1.0, 2.0 * math.exp(-t * t / (2.0 * v)))
    return WrapBound(
        per_coordinate=per,
        any_coordinate=min(1.0, d * per),
        expected_wrapped=d * per,
        std_proxy=math.sqrt(v),
        bias_bound=bias,
    )
