"""The shuffle bounds through the Certificate record: only the two upper bounds certify."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secagg_dp.accounting import SHUFFLE_BOUNDS, shuffle_certificate
from secagg_dp.errors import ParameterError

DELTA = 1e-5


def _cks(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """Canonne, Kamath & Steinke 2020, Prop. 12, written out here (independent of the library's conversion)."""
    return float(np.min(rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)))


def test_gaussian_upper_is_the_unshuffled_gaussian():
    cert = shuffle_certificate("gaussian-upper", n=100, sigma=2.0, rounds=10, delta=DELTA)
    o = np.arange(2, 257, dtype=np.float64)
    assert cert.epsilon == pytest.approx(_cks(o, 10 * o / (2 * 2.0**2), DELTA), rel=1e-12)  # LT22 Cor. 1
    assert cert.certificate is True and cert.bound == "upper" and cert.neighbouring == "replace-one"


@pytest.mark.parametrize("name", sorted(SHUFFLE_BOUNDS))
def test_only_upper_bounds_certify(name):
    gamma = 0.5 if name.startswith("checkin") else None
    cert = shuffle_certificate(name, n=50, sigma=1.0, rounds=5, delta=DELTA, gamma=gamma)
    assert cert.certificate is (name in ("gaussian-upper", "checkin-upper"))
    assert cert.bound == ("upper" if cert.certificate else "estimate") and cert.citation
    upper = shuffle_certificate("gaussian-upper", n=50, sigma=1.0, rounds=5, delta=DELTA)
    assert 0.0 < cert.epsilon <= upper.epsilon * (1 + 1e-12)  # nothing is above the unshuffled Gaussian


def test_bad_arguments_are_refused():
    with pytest.raises(ParameterError, match="bound"):
        shuffle_certificate("gaussian-lower", n=10, sigma=1.0, rounds=1, delta=DELTA)
    with pytest.raises(ParameterError, match="gamma"):
        shuffle_certificate("checkin-upper", n=10, sigma=1.0, rounds=1, delta=DELTA)
    with pytest.raises(ParameterError, match="orders"):
        shuffle_certificate("gaussian-upper", n=10, sigma=1.0, rounds=1, delta=DELTA, orders=[2.5, 3])
