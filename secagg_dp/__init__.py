"""secagg-dp: secure aggregation with discrete differential-privacy noise.

Subpackages: ``noise`` (discrete Gaussian and Skellam samplers, exact pmfs), ``quantize`` (the Z_q codec),
``crypto`` (PRG, KDF, key agreement, Shamir, masking recipe), ``accounting`` (RDP certificates).
"""

from secagg_dp.errors import (
    ParameterError,
    PrivacyBudgetExceeded,
    ProtocolError,
    SecAggDPError,
)

__version__ = "0.2.0"

__all__ = ["SecAggDPError", "ParameterError", "ProtocolError", "PrivacyBudgetExceeded", "__version__"]
