"""The Z_q codec: clip → randomized Hadamard rotation → scale → conditional randomized rounding → Z_{2^b}.

Kairouz, Liu & Steinke 2021 (arXiv:2102.06387); seed paper 002 (Wang & Jia), Sec. 3. See README.md.
"""

from secagg_dp.quantize.codec import ZqCodec, clip_l2
from secagg_dp.quantize.hadamard import fwht, fwht_butterfly, next_pow2, rademacher_signs, rotate, sylvester, unrotate
from secagg_dp.quantize.rounding import (
    conditional_round,
    rounded_l1_bound,
    rounded_l2_bound,
    shrink_to_norm,
    stochastic_round,
)
from secagg_dp.quantize.scale import DEFAULT_BETA, WrapBound, scale_for, wrap_around_bound

__all__ = [
    "ZqCodec",
    "clip_l2",
    "fwht",
    "fwht_butterfly",
    "sylvester",
    "next_pow2",
    "rademacher_signs",
    "rotate",
    "unrotate",
    "shrink_to_norm",
    "stochastic_round",
    "conditional_round",
    "rounded_l2_bound",
    "rounded_l1_bound",
    "DEFAULT_BETA",
    "scale_for",
    "WrapBound",
    "wrap_around_bound",
]
