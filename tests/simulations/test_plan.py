"""plan(): the codec scale never asks the samplers for a grid noise std outside their range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secagg_dp.errors import ConfigError, ParameterError
from secagg_dp.noise import sample_discrete_gaussian, sample_skellam
from simulations.runner import SIGMA_INT_MAX, plan
from tests.simulations.conftest import small_config


def test_sigma_int_max_is_the_samplers_range():
    # the documented range of both samplers: sigma in (0, 1e6], Skellam variance in (0, 1e12]
    rng = np.random.default_rng(0)
    assert sample_discrete_gaussian(SIGMA_INT_MAX, 3, rng=rng).shape == (3,)
    assert sample_skellam(SIGMA_INT_MAX**2, 3, rng=rng).shape == (3,)
    with pytest.raises(ParameterError, match="sigma"):
        sample_discrete_gaussian(np.nextafter(SIGMA_INT_MAX, math.inf), 1, rng=rng)
    with pytest.raises(ParameterError, match="variance"):
        sample_skellam(np.nextafter(SIGMA_INT_MAX**2, math.inf), 1, rng=rng)


@pytest.mark.parametrize(("bits", "task"), [(62, "mean"), (40, "mean"), (62, "logreg")])
def test_wide_bit_widths_cap_the_scale_at_the_sampler_range(bits, task):
    task_cfg = {"name": "mean", "dim": 24} if task == "mean" else {"name": "logreg", "local_steps": 2}
    cfg = small_config(secagg={"bits": bits}, task=task_cfg)
    p = plan(cfg, 11)
    # uncapped, the k-stddev rule would put the grid std far beyond the samplers' 1e6 (6e16 at b = 62)
    assert p.scale_capped and p.sigma_local * p.scale_rule > 1e9
    assert p.sigma_int <= SIGMA_INT_MAX and p.sigma_int == pytest.approx(SIGMA_INT_MAX, rel=1e-12)
    assert p.scale == pytest.approx(SIGMA_INT_MAX / p.sigma_local, rel=1e-12) and p.scale < p.scale_rule
    # Delta_2 is the codec's at the scale actually used (c*s plus rounding), which the accountant reads
    assert p.l2_sensitivity == pytest.approx(cfg.privacy.clip * p.scale, rel=1e-3)


def test_narrow_bit_widths_keep_the_k_stddev_scale():
    p = plan(small_config(secagg={"bits": 20}), 11)
    assert not p.scale_capped and p.scale == p.scale_rule and p.sigma_int < SIGMA_INT_MAX


def test_noise_too_large_for_the_sampler_range_is_a_config_error():
    # z = 1e7: at the capped grid std 1e6 a clipped vector is < 1 grid unit long, rounding dominates
    cfg = small_config(secagg={"bits": 62}, privacy={"noise_multiplier": 1e7})
    with pytest.raises(ConfigError, match="privacy.noise_multiplier"):
        plan(cfg, 11)
