"""ZqCodec end to end: decoded modular sum vs the true sum, bit-exact Z_q sums up to b = 62, validation,
scale rule and wrap-around bound."""

from __future__ import annotations

import dataclasses
import math

import mpmath
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import secagg_dp.quantize as quantize
from secagg_dp.errors import ParameterError
from secagg_dp.quantize import ZqCodec, clip_l2, wrap_around_bound
from secagg_dp.zq import sum_mod


def _max_scale_without_wrap(n: int, bits: int, clip: float, d: int, noise_inf: int = 0) -> float:
    # Deterministic no-wrap condition: |A_j| ≤ Σ_i ‖x̃_i‖₂ + Σ_i ‖z_i‖_∞ ≤ n(c·s + √d) + noise_inf < q/2.
    return ((2.0 ** (bits - 1) - noise_inf - 1.0) / n - math.sqrt(d) - 1.0) / clip


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(1, 300),
    n=st.integers(1, 40),
    bits=st.integers(8, 62),
    clip=st.floats(0.01, 100.0),
    frac=st.floats(0.01, 1.0),
    with_noise=st.booleans(),
    seed=st.integers(0, 2**32),
)
@example(dim=300, n=40, bits=62, clip=100.0, frac=1.0, with_noise=True, seed=1)
@example(dim=1, n=11, bits=58, clip=3.0, frac=1.0, with_noise=False, seed=0)  # float-norm edge (fixed)
def test_decoded_sum_matches_true_sum_within_bound(
    dim: int, n: int, bits: int, clip: float, frac: float, with_noise: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    d = quantize.next_pow2(dim)
    noise_amp = 50 if with_noise else 0
    smax = min(_max_scale_without_wrap(n, bits, clip, d, n * noise_amp), 2.0**60 / clip)
    assume(smax * clip > 1.0)
    codec = ZqCodec(dim, bits, clip, frac * smax, rotation_seed=seed)
    x = rng.normal(size=(n, dim)) * rng.choice([0.1, 1.0, 1e3])
    noise = rng.integers(-noise_amp, noise_amp + 1, size=(n, d)) if with_noise else None
    enc = codec.encode(x, noise=noise, rng=rng)
    assert enc.dtype == np.uint64 and enc.shape == (n, d)
    assert int(enc.max()) < 2**bits
    decoded = codec.decode(sum_mod(enc, bits))
    assert decoded.shape == (dim,)
    truth = clip_l2(x, clip).sum(axis=0)
    noise_l2 = float(np.linalg.norm(noise.sum(axis=0))) if with_noise else 0.0
    bound = codec.decode_error_bound(n, noise_l2)
    slack = 1e-9 * (n * clip + bound)  # float64 transforms, relative ~1e-15·log2(d)
    assert np.linalg.norm(decoded - truth) <= bound + slack


@settings(max_examples=60, deadline=None)
@given(bits=st.integers(1, 62), n=st.integers(1, 25), dim=st.integers(1, 40), seed=st.integers(0, 2**32))
@example(bits=62, n=25, dim=40, seed=0)
@example(bits=1, n=25, dim=3, seed=0)
def test_modular_sum_is_bit_exact_against_python_ints(bits: int, n: int, dim: int, seed: int) -> None:
    # Oracle: Python big integers, (Σ_i (x̃_i + z_i)) mod 2^b, with z spanning the full int64 range.
    q = 1 << bits
    scale = min(2.0 ** (bits + 3), 2.0**60)  # large enough that single encodings wrap too
    codec = ZqCodec(dim, bits, 1.0, scale, rotation_seed=seed, beta=0.0)
    x = np.random.default_rng(seed).normal(size=(n, dim))
    noise = np.random.default_rng(seed + 1).integers(-(2**63), 2**63 - 1, size=(n, codec.padded_dim), dtype=np.int64)
    xq = codec.quantize(x, rng=np.random.default_rng(seed + 2))
    enc = codec.encode(x, noise=noise, rng=np.random.default_rng(seed + 2))  # same rounding draws
    xq_l, z_l, enc_l = xq.tolist(), noise.tolist(), enc.tolist()
    for i in range(n):
        assert enc_l[i] == [(a + b) % q for a, b in zip(xq_l[i], z_l[i], strict=True)]
    expected = [sum(xq_l[i][j] + z_l[i][j] for i in range(n)) % q for j in range(codec.padded_dim)]
    assert sum_mod(enc, bits).tolist() == expected
    # The centred lift used by decode matches Python's: v ↦ ((v + q/2) mod q) − q/2.
    lifted = [((v + q // 2) % q) - q // 2 for v in expected]
    np.testing.assert_array_equal(
        codec.decode(sum_mod(enc, bits)),
        codec.unrotate(np.array([float(v) for v in lifted]) / scale),
    )


def test_decode_lift_edges_at_62_bits() -> None:
    # q = 2^62: residues q/2 − 1 and q/2 lift to +(q/2 − 1) and −q/2 (the documented range [−q/2, q/2)).
    bits, q = 62, 1 << 62
    codec = ZqCodec(1, bits, 1.0, 1.0, rotation_seed=0, beta=0.0)
    for residue, value in ((q // 2 - 1, q // 2 - 1), (q // 2, -(q // 2)), (q - 1, -1), (0, 0)):
        out = codec.decode(np.array([residue], dtype=np.uint64))
        assert out[0] == float(value) * codec._signs[0]  # d = 1: H = [1], R^{-1} multiplies by the sign


def test_single_vector_and_batch_agree() -> None:
    codec = ZqCodec(10, 20, 1.0, 1000.0, rotation_seed=3)
    x = np.random.default_rng(0).normal(size=(4, 10))
    batch = codec.encode(x, rng=np.random.default_rng(7))
    assert batch.shape == (4, 16)
    # Rounding draws differ between the two paths, so compare decodes: each is within the deterministic
    # decode bound of the clipped sum, hence within twice that of each other.
    singles = np.stack([codec.encode(row, rng=np.random.default_rng(i)) for i, row in enumerate(x)])
    dec_b, dec_s = codec.decode(sum_mod(batch, 20)), codec.decode(sum_mod(singles, 20))
    assert np.linalg.norm(dec_b - dec_s) <= 2 * codec.decode_error_bound(4)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0, np.nan, 0.0]),
        np.array([1.0, np.inf, 0.0]),
        np.array([1.0, -np.inf, 0.0]),
        np.ones(4),
        np.ones((2, 2, 3)),
        np.float64(1.0),
        np.array([1 + 1j, 0, 0]),
        np.array(["a", "b", "c"]),
        np.array([True, False, True]),
        np.array([1.0, None, 2.0], dtype=object),
    ],
)
def test_bad_inputs_rejected(bad: np.ndarray) -> None:
    codec = ZqCodec(3, 16, 1.0, 10.0, rotation_seed=0)
    with pytest.raises(ParameterError):
        codec.encode(bad, rng=np.random.default_rng(0))


def test_bad_noise_and_aggregate_rejected() -> None:
    codec = ZqCodec(3, 16, 1.0, 10.0, rotation_seed=0)
    x = np.ones(3)
    for noise in (
        np.zeros(4),
        np.zeros(4, dtype=np.int32),
        np.zeros(3, dtype=np.int64),
        np.zeros((1, 4), dtype=np.int64),
    ):
        with pytest.raises(ParameterError, match="noise"):
            codec.encode(x, noise=noise, rng=np.random.default_rng(0))
    for agg in (
        np.zeros(4),
        np.array([0, 0, 0, 1 << 16], dtype=np.uint64),
        np.array([-1, 0, 0, 0]),
        np.zeros(3, dtype=np.uint64),
    ):
        with pytest.raises(ParameterError, match="aggregate"):
            codec.decode(agg)
    with pytest.raises(TypeError):
        codec.encode(x, rng=1234)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(dim=0),
        dict(dim=True),
        dict(bits=0),
        dict(bits=63),
        dict(bits=16.5),
        dict(clip=0.0),
        dict(clip=-1.0),
        dict(scale=float("nan")),
        dict(scale=float("inf")),
        dict(rotation_seed=-1),
        dict(beta=1.0),
        dict(beta=-0.1),
        dict(max_attempts=0),
        dict(clip=4.0, scale=2.0**60),
    ],
)
def test_constructor_validation(kwargs: dict) -> None:
    args = dict(dim=8, bits=16, clip=1.0, scale=10.0, rotation_seed=1) | kwargs
    with pytest.raises(ParameterError):
        ZqCodec(args.pop("dim"), args.pop("bits"), args.pop("clip"), args.pop("scale"), **args)


def test_codec_is_frozen_and_public_attributes() -> None:
    codec = ZqCodec(1000, 20, 2.0, 50.0, rotation_seed=11)
    with pytest.raises(dataclasses.FrozenInstanceError):
        codec.scale = 1.0  # type: ignore[misc]
    assert codec.padded_dim == 1024 and codec.modulus == 2**20
    # Δ₂ and Δ₁ from [KLS21] Eq. (2) by hand: C = 100, d = 1024, β = e^{-1/2}:
    # bound2² = 100² + 256 + 1·(100 + 16) = 10372; bound1 = 132; Δ₂ = sqrt(10372); Δ₁ = Δ₂·min(32, Δ₂).
    assert codec.l2_sensitivity == pytest.approx(math.sqrt(10372.0), rel=1e-14)
    assert codec.l1_sensitivity == pytest.approx(math.sqrt(10372.0) * 32.0, rel=1e-14)
    assert "rotation_seed=11" in repr(codec)
    assert set(quantize.__all__) >= {"ZqCodec", "scale_for", "wrap_around_bound"}
    for name in quantize.__all__:
        assert getattr(quantize, name).__doc__


def test_scale_for_formula_against_mpmath() -> None:
    # Independent evaluation at 50 digits of s = sqrt(2^{2b} − n k²) / (2k sqrt(c²n²/d + nσ²)), d padded.
    mpmath.mp.dps = 50
    b, n, c, dim, sigma, k = 20, 100, 0.5, 1000, 0.01, 4.0
    d = 1024
    ref = mpmath.sqrt(mpmath.mpf(2) ** (2 * b) - n * k**2) / (
        2 * k * mpmath.sqrt(mpmath.mpf(c) ** 2 * n**2 / d + n * mpmath.mpf(sigma) ** 2)
    )
    s = ZqCodec.scale_for(bits=b, n_clients=n, clip=c, dim=dim, sigma=sigma, k=k)
    assert s == pytest.approx(float(ref), rel=1e-13)
    # The same scale with an already padded dim.
    assert ZqCodec.scale_for(bits=b, n_clients=n, clip=c, dim=1024, sigma=sigma, k=k) == s


@pytest.mark.parametrize("k", [2.0, 4.0, 6.0])
def test_scale_for_puts_q_half_at_k_std_proxies(k: float) -> None:
    # Identity: at the k-rule scale, k·sqrt(V) = q/2, so with β = 0 the per-coordinate tail bound is
    # exactly 2·exp(−k²/2) (closed form).
    s = ZqCodec.scale_for(bits=24, n_clients=50, clip=1.0, dim=100, sigma=0.05, k=k, beta=0.0)
    wb = wrap_around_bound(bits=24, scale=s, clip=1.0, dim=100, n_clients=50, sigma=0.05, beta=0.0)
    assert k * wb.std_proxy == pytest.approx(2.0**23, rel=1e-12)
    assert wb.per_coordinate == pytest.approx(2 * math.exp(-k * k / 2), rel=1e-9)
    assert wb.any_coordinate == pytest.approx(min(1.0, 128 * wb.per_coordinate))
    assert wb.bias_bound == 0.0


def test_scale_for_refuses_infeasible_budgets() -> None:
    # 2^{2b} = n k² exactly: the released KLS21 code checks only '<' and returns scale 0 silently here.
    with pytest.raises(ParameterError, match=r"bits >= 3"):
        ZqCodec.scale_for(bits=2, n_clients=1, clip=1.0, dim=10, sigma=0.0, k=4.0)
    with pytest.raises(ParameterError, match="Infeasible bit budget"):
        ZqCodec.scale_for(bits=8, n_clients=10_000, clip=1.0, dim=10, sigma=0.0)
    # Feasible range but the scale cannot carry signal: 8 bits, 1000 clients, d = 2^20.
    with pytest.raises(ParameterError, match="Scale too small to carry signal.*To fix"):
        ZqCodec.scale_for(bits=8, n_clients=1000, clip=1.0, dim=2**20, sigma=1.0)
    # Raising max_inflation is the explicit escape hatch; the formula value is then returned.
    s = ZqCodec.scale_for(bits=8, n_clients=1000, clip=1.0, dim=2**20, sigma=1.0, max_inflation=1e9)
    assert 0 < s < 1
    for bad in (dict(bits=0), dict(n_clients=0), dict(clip=0.0), dict(sigma=-1.0), dict(k=0.0), dict(dim=0)):
        args = dict(bits=16, n_clients=10, clip=1.0, dim=10, sigma=0.1) | bad
        with pytest.raises(ParameterError):
            ZqCodec.scale_for(**args)


def test_wrap_bound_is_an_upper_bound_empirically() -> None:
    # A configuration where wraps are frequent: the bound must not be below the observed frequency.
    # Observed per-coordinate frequency p̂ over 64·400 coordinates; failure would need p̂ > bound, and the
    # bound (≈0.9 here) exceeds the true rate by far more than 5.5 binomial std devs (false-failure < 1e-6).
    bits, n, dim, sigma = 10, 30, 64, 3.0
    s = 20.0
    codec = ZqCodec(dim, bits, 1.0, s, rotation_seed=1, beta=0.0)
    wb = codec.wrap_bound(n, sigma)
    rng = np.random.default_rng(5)
    wrapped = 0
    trials = 400
    for _ in range(trials):
        x = rng.normal(size=(n, dim))
        xq = codec.quantize(x, rng=rng).sum(axis=0)
        z = np.rint(rng.normal(scale=s * sigma, size=(n, codec.padded_dim))).astype(np.int64).sum(axis=0)
        total = xq + z
        wrapped += int(np.sum((total < -(2 ** (bits - 1))) | (total >= 2 ** (bits - 1))))
    p_hat = wrapped / (trials * codec.padded_dim)
    assert 0 < p_hat <= wb.per_coordinate


@pytest.mark.parametrize("rows", [9, 75])
@pytest.mark.parametrize("bits", [16, 40, 62])
def test_encode_sum_equals_sum_of_encoded_rows_bit_for_bit(bits: int, rows: int) -> None:
    # The ideal aggregator's fast path: the same draws as encode(), summed without wrapping each row (75 rows:
    # several passes of the fused encoder, a ragged last one, rows redrawn by the conditional rounding).
    codec = ZqCodec(37, bits, 1.0, 50.0, rotation_seed=4)
    x = np.random.default_rng(1).normal(size=(rows, 37))
    noise = np.random.default_rng(2).integers(-(2**40), 2**40, size=(rows, 64))
    keep = np.resize([True, False, True, True, False, True, True, True, False], rows)
    for z, k in ((None, None), (noise, None), (noise, keep), (None, keep)):
        rows = codec.encode(x, noise=z, rng=np.random.default_rng(3))
        want = sum_mod(rows if k is None else rows[k], bits)
        got = codec.encode_sum(x, keep=k, noise=z, rng=np.random.default_rng(3))
        assert got.dtype == np.uint64 and np.array_equal(got, want)
    with pytest.raises(ParameterError, match="keep"):
        codec.encode_sum(x, keep=keep[:3])
    with pytest.raises(ParameterError, match="'x'"):
        codec.encode_sum(x[0])
    with pytest.raises(ParameterError, match="noise"):
        codec.encode_sum(x, noise=noise.astype(np.int32))


def test_quantize_equals_the_stepwise_pipeline() -> None:
    # clip -> pad -> R = H D (dense scipy Hadamard) -> scale, then conditional rounding: the fused path rounds
    # the same vector up to float64 rounding, so with the same uniforms it gives the same integers except where
    # a coordinate's fraction lies within ~1e-9 of a uniform (never, for this seed).
    import scipy.linalg

    from secagg_dp.quantize import conditional_round, rademacher_signs

    codec = ZqCodec(20, 30, 2.0, 1000.0, rotation_seed=8)
    x = np.random.default_rng(5).normal(size=(6, 20)) * 3.0
    xc = clip_l2(x, 2.0)
    padded = np.zeros((6, 32))
    padded[:, :20] = xc
    dense = scipy.linalg.hadamard(32) / np.sqrt(32) @ np.diag(rademacher_signs(8, 32))
    y = padded @ dense.T * 1000.0
    want = conditional_round(y, codec.l2_sensitivity, rng=np.random.default_rng(6))
    got = codec.quantize(x, rng=np.random.default_rng(6))
    assert np.array_equal(got, want)


def test_fused_passes_equal_the_stage_by_stage_rows_bit_for_bit() -> None:
    # ZqCodec._rounded_rows (passes of 32 rows, what encode and encode_sum run) against _quantize_rows (each
    # stage over the whole batch): rows within the clip (normalised to c, float norms a few ulps either side),
    # clipped rows (passes mixing both), and a tight beta so that many rows are redrawn.
    from secagg_dp.quantize.codec import _PASS_ROWS

    rng = np.random.default_rng(7)
    x = rng.normal(size=(3 * _PASS_ROWS + 5, 1000))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[_PASS_ROWS + 3] *= 4.0  # one clipped row in the second pass
    x[2 * _PASS_ROWS :] *= rng.uniform(0.5, 3.0, size=(_PASS_ROWS + 5, 1))
    for beta in (math.exp(-0.5), 0.99):
        codec = ZqCodec(1000, 32, 1.0, 300.0, rotation_seed=2, beta=beta)
        want = codec._quantize_rows(x, np.random.default_rng(8))
        assert np.array_equal(codec._rounded_rows(x, np.random.default_rng(8)), want)
        keep = rng.random(len(x)) < 0.6
        got = codec._rounded_rows(x, np.random.default_rng(8), keep=keep, rows=False)
        assert np.array_equal(got, want[keep].sum(axis=0))
    # the draws that were redrawn: the stage-by-stage first draw rejects some rows at beta = 0.99
    from secagg_dp.quantize.rounding import _round_rows, _within

    first = _round_rows(codec._clip_rotate_scale(x), np.random.default_rng(8))
    assert 0 < int((~_within(first, codec.l2_sensitivity)).sum()) < len(x)


def test_quantize_equals_the_dense_pipeline_over_several_passes() -> None:
    # The dense oracle of test_quantize_equals_the_stepwise_pipeline on 75 rows (three passes), half of them
    # normalised to the clip (not clipped: the pass multiplies by the tiled signs) and half clipped.
    import scipy.linalg

    from secagg_dp.quantize import conditional_round, rademacher_signs

    codec = ZqCodec(20, 30, 2.0, 1000.0, rotation_seed=8)
    x = np.random.default_rng(5).normal(size=(75, 20)) * 3.0
    x[::2] *= 2.0 / np.linalg.norm(x[::2], axis=1, keepdims=True)
    padded = np.zeros((75, 32))
    padded[:, :20] = clip_l2(x, 2.0)
    dense = scipy.linalg.hadamard(32) / np.sqrt(32) @ np.diag(rademacher_signs(8, 32))
    y = padded @ dense.T * 1000.0
    want = conditional_round(y, codec.l2_sensitivity, rng=np.random.default_rng(6))
    got = codec.quantize(x, rng=np.random.default_rng(6))
    assert np.array_equal(got, want)


def test_input_check_finds_non_finite_values_and_accepts_huge_finite_ones() -> None:
    # The finite check sums the array first; a sum that overflows is decided entry by entry.
    codec = ZqCodec(4, 32, 1.0, 10.0, rotation_seed=1)
    huge = np.full((3, 4), 1e308)  # finite, but their sum overflows
    assert codec.quantize(huge, rng=np.random.default_rng(0)).shape == (3, 4)
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones((3, 4))
        x[1, 2] = bad
        with pytest.raises(ParameterError, match="NaN or infinite"):
            codec.quantize(x, rng=np.random.default_rng(0))
    mixed = huge.copy()
    mixed[0, 0] = -np.inf  # inf and a huge sum of the other sign: the sum is NaN
    with pytest.raises(ParameterError, match="NaN or infinite"):
        codec.encode_sum(mixed)
