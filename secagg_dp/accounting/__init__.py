"""RDP accounting: mechanism events, subsampling, conversion, calibration, ledger.

Other modules of this package (check-in, shuffling, local steps, dropout, baselines) are imported by
their own names; this namespace re-exports the core only.
"""

from secagg_dp.accounting.calibration import (
    calibrate_gaussian_noise_multiplier,
    calibrate_noise,
    gaussian_epsilon,
)
from secagg_dp.accounting.conversion import (
    LargestOrderWarning,
    dp_delta,
    dp_to_rdp,
    dp_to_rdp_lemma1,
    pure_dp_to_rdp,
    rdp_to_dp,
)
from secagg_dp.accounting.ledger import PrivacyLedger, RdpAccountant, UnsupportedEventError, register_event_type
from secagg_dp.accounting.mechanisms import (
    NEIGHBOURING_RELATIONS,
    Composed,
    DiscreteGaussian,
    DistributedDiscreteGaussian,
    Gaussian,
    PoissonSampled,
    PrivacyEvent,
    SampledWithoutReplacement,
    SelfComposed,
    Skellam,
    check_neighbouring,
    sampled,
    sum_l2_sensitivity,
)
from secagg_dp.accounting.rdp import (
    DEFAULT_ORDERS,
    ddg_rdp,
    ddg_tau,
    discrete_gaussian_rdp,
    gaussian_rdp,
    skellam_rdp,
)
from secagg_dp.accounting.subsampling import (
    integer_rdp_table,
    poisson_subsampled_gaussian_rdp,
    poisson_subsampled_rdp,
    wor_subsampled_gaussian_rdp,
    wor_subsampled_rdp,
)

__all__ = [
    "DEFAULT_ORDERS",
    "NEIGHBOURING_RELATIONS",
    "check_neighbouring",
    "sum_l2_sensitivity",
    "PrivacyEvent",
    "Gaussian",
    "DiscreteGaussian",
    "DistributedDiscreteGaussian",
    "Skellam",
    "PoissonSampled",
    "SampledWithoutReplacement",
    "Composed",
    "SelfComposed",
    "sampled",
    "gaussian_rdp",
    "discrete_gaussian_rdp",
    "ddg_tau",
    "ddg_rdp",
    "skellam_rdp",
    "integer_rdp_table",
    "wor_subsampled_rdp",
    "wor_subsampled_gaussian_rdp",
    "poisson_subsampled_gaussian_rdp",
    "poisson_subsampled_rdp",
    "LargestOrderWarning",
    "rdp_to_dp",
    "dp_delta",
    "pure_dp_to_rdp",
    "dp_to_rdp",
    "dp_to_rdp_lemma1",
    "calibrate_noise",
    "gaussian_epsilon",
    "calibrate_gaussian_noise_multiplier",
    "RdpAccountant",
    "PrivacyLedger",
    "UnsupportedEventError",
    "register_event_type",
]
