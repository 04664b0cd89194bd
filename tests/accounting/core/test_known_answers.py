"""Known answers from the DDG authors' accounting code (google-research/federated distributed_dp
accounting_utils.py ddgauss_epsilon / skellam_epsilon; add/remove, Δ = one client's clipped and rounded vector,
local sigma = z*c/sqrt(n), scale from the k-stddev rule on the padded dimension, beta = e^{-1/2}, one round,
delta = 1e-5), as quoted in issue 4."""

from __future__ import annotations

import math

import pytest

from secagg_dp.accounting import DEFAULT_ORDERS, DistributedDiscreteGaussian, Skellam, rdp_to_dp
from secagg_dp.quantize import ZqCodec

CASES = [
    # n, d, b, c, z, k, eps_ddg, order_ddg, eps_skellam
    (100, 65536, 16, 1.0, 1.0, 4.0, 4.75376495, 5, 4.753764989),
    (1000, 250, 16, 10.0, 2.0, 2.0, 2.174092466, 10, 2.174096895),
]


@pytest.mark.parametrize("n,d,b,c,z,k,e_ddg,o_ddg,e_sk", CASES)
def test_ddg_and_skellam_known_answers(n, d, b, c, z, k, e_ddg, o_ddg, e_sk):
    beta = math.exp(-0.5)
    sigma = z * c / math.sqrt(n)
    scale = ZqCodec.scale_for(bits=b, n_clients=n, clip=c, dim=d, sigma=sigma, k=k, beta=beta)
    codec = ZqCodec(d, b, c, scale, rotation_seed=0, beta=beta)
    l2, l1 = codec.l2_sensitivity, codec.l1_sensitivity
    ddg = DistributedDiscreteGaussian(n, sigma * scale, codec.padded_dim, l2, l1, "add-remove")
    eps, order = rdp_to_dp(DEFAULT_ORDERS, ddg.rdp(DEFAULT_ORDERS), 1e-5)
    assert eps == pytest.approx(e_ddg, abs=5e-9)
    assert order == o_ddg
    sk = Skellam(n * (sigma * scale) ** 2, l2, l1, "add-remove")
    eps_s, _ = rdp_to_dp(DEFAULT_ORDERS, sk.rdp(DEFAULT_ORDERS), 1e-5)
    assert eps_s == pytest.approx(e_sk, abs=5e-10)
