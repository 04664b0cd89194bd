"""Parameter validation, randomness policy and public API of secagg_dp.noise."""

from __future__ import annotations

import numpy as np
import pytest
from randomgen import AESCounter

import secagg_dp.noise as noise
import secagg_dp.rng as rng_module
from secagg_dp.errors import ParameterError

SAMPLERS = [
    (noise.sample_discrete_gaussian, "sigma"),
    (noise.sample_discrete_gaussian_exact, "sigma"),
    (noise.sample_skellam, "variance"),
]


@pytest.mark.parametrize(("sampler", "name"), SAMPLERS)
@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), float("inf"), -float("inf"), "1", True, 1e13])
def test_invalid_scale_rejected(sampler, name, bad):
    with pytest.raises(ParameterError, match=name):
        sampler(bad, 3, rng=np.random.default_rng(0))


def test_sigma_upper_bound_is_one_million():
    rng = np.random.default_rng(0)
    assert noise.sample_discrete_gaussian(1e6, 2, rng=rng).shape == (2,)
    with pytest.raises(ParameterError, match=r"sigma.*\(0, 1e\+06\]"):
        noise.sample_discrete_gaussian(1e6 * (1 + 1e-12), 2, rng=rng)
    with pytest.raises(ParameterError, match="variance"):
        noise.sample_skellam(1e12 * (1 + 1e-12), 2, rng=rng)


@pytest.mark.parametrize(("sampler", "name"), SAMPLERS)
@pytest.mark.parametrize("bad_size", [-1, 2.5, (2, -1), (2, 1.5), "3", None, True])
def test_invalid_size_rejected(sampler, name, bad_size):
    with pytest.raises(ParameterError, match="size"):
        sampler(1.0, bad_size, rng=np.random.default_rng(0))


@pytest.mark.parametrize(("sampler", "name"), SAMPLERS)
@pytest.mark.parametrize("bad_rng", [42, "seed", np.random.RandomState(0), np.random.PCG64(0)])
def test_wrong_rng_type_is_type_error(sampler, name, bad_rng):
    with pytest.raises(TypeError, match="rng"):
        sampler(1.0, 3, rng=bad_rng)


@pytest.mark.parametrize(
    "pmf", [noise.discrete_gaussian_pmf, noise.discrete_gaussian_logpmf, noise.skellam_pmf, noise.skellam_logpmf]
)
def test_pmf_rejects_bad_points_and_params(pmf):
    for bad_x in (0.5, [1, 2.5], float("nan"), np.inf, "1", 1j, np.array([True])):
        with pytest.raises(ParameterError, match="'x'"):
            pmf(bad_x, 1.0)
    for bad_param in (0.0, -2.0, float("nan"), float("inf")):
        with pytest.raises(ParameterError):
            pmf(1, bad_param)


@pytest.mark.parametrize(("sampler", "name"), SAMPLERS)
def test_rng_none_uses_fresh_aes_counter_generator(sampler, name, monkeypatch):
    made = []
    original = rng_module.secure_generator

    def spy():
        gen = original()
        made.append(gen)
        return gen

    monkeypatch.setattr(rng_module, "secure_generator", spy)
    out = sampler(2.0, 50)
    assert out.dtype == np.int64 and out.shape == (50,)
    assert len(made) == 1 and isinstance(made[0].bit_generator, AESCounter)
    # Two calls with rng=None are independent draws from OS entropy: equal outputs would be a bug
    # (P(equal) for 50 draws at sigma^2 = 4 is below 0.2^50).
    assert not np.array_equal(sampler(2.0, 50), sampler(2.0, 50))


def test_public_names_exported_and_documented():
    expected = {
        "sample_discrete_gaussian",
        "sample_discrete_gaussian_exact",
        "sample_skellam",
        "discrete_gaussian_pmf",
        "discrete_gaussian_logpmf",
        "discrete_gaussian_log_normaliser",
        "skellam_pmf",
        "skellam_logpmf",
        "bernoulli_exp_exact",
        "sample_discrete_laplace_exact",
    }
    constants = {"SIGMA_MAX", "VARIANCE_MAX"}
    assert set(noise.__all__) == expected | constants
    for name in expected:
        obj = getattr(noise, name)
        assert callable(obj) and obj.__doc__ and len(obj.__doc__) > 40, name
    # the exported limits are the samplers' actual boundaries (issue 2: sigma in (0, 1e6])
    assert noise.SIGMA_MAX == 1e6 and noise.VARIANCE_MAX == noise.SIGMA_MAX**2
    rng = np.random.default_rng(0)
    assert noise.sample_discrete_gaussian(noise.SIGMA_MAX, 3, rng=rng).shape == (3,)
    assert noise.sample_skellam(noise.VARIANCE_MAX, 3, rng=rng).shape == (3,)
    with pytest.raises(ParameterError, match="sigma"):
        noise.sample_discrete_gaussian(np.nextafter(noise.SIGMA_MAX, np.inf), 3, rng=rng)
    with pytest.raises(ParameterError, match="variance"):
        noise.sample_skellam(np.nextafter(noise.VARIANCE_MAX, np.inf), 3, rng=rng)


def test_error_message_names_argument_expectation_and_value():
    with pytest.raises(ParameterError) as info:
        noise.sample_discrete_gaussian(-3.0, 2, rng=np.random.default_rng(0))
    msg = str(info.value)
    assert "'sigma'" in msg and "-3.0" in msg and "(0" in msg
