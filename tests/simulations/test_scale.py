"""The batched simulator paths equal straightforward per-client references with the same stream layout."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from randomgen import AESCounter

from secagg_dp.errors import ConfigError
from secagg_dp.noise import sample_discrete_gaussian
from simulations import aggregators, runner
from simulations.clients import BLOCK, block_rng, make_codec
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_round, plan, select_participants
from simulations.tasks.mean import _row_sq, client_vectors, splitmix64_words
from tests.simulations.conftest import small_config

_M64 = (1 << 64) - 1


def _splitmix64(key: int, k: int) -> int:
    """Output k (from 0) of SplitMix64 seeded with ``key``, in Python integers (Vigna's splitmix64.c)."""
    z = (key + (k + 1) * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def test_splitmix64_reference_matches_published_outputs():
    # the first five outputs for the seed 1234567 listed by the Rosetta Code task "Pseudo-random
    # numbers/Splitmix64" (an independent statement of Vigna's splitmix64.c)
    want = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821]
    assert [_splitmix64(1234567, k) for k in range(5)] == want
    ids = np.array([0, 3, 2**40 + 5])  # a large id: the counter wraps mod 2^64 as the reference's does
    got = splitmix64_words(1234567, ids, 7)
    assert got.tolist() == [[_splitmix64(1234567, int(i) * 7 + j) for j in range(7)] for i in ids]


def _reference_client_vector(root: int, cid: int, dim: int, clip: float) -> np.ndarray:
    """Client data written out once, one client at a time, from the documented stream definition."""
    mu = np.random.default_rng(np.random.SeedSequence(root, spawn_key=(0, 0))).standard_normal(dim)
    mu /= np.linalg.norm(mu)
    key = int(np.random.SeedSequence(root, spawn_key=(0, 1)).generate_state(1, np.uint64)[0])
    h = (dim + 3) // 4
    halves = []
    for j in range(2 * h):  # words cid * 2h .. cid * 2h + 2h - 1, low half first
        word = _splitmix64(key, cid * 2 * h + j)
        halves += [word & 0xFFFFFFFF, word >> 32]
    u = np.array([v >> 8 for v in halves], dtype=np.float32)[None]  # one-row arrays: numpy's float32 loops
    r = np.sqrt(np.float32(-2.0) * np.log((u[:, : 2 * h] + np.float32(1.0)) * np.float32(2.0**-24)))
    t = u[:, 2 * h :] * np.float32(2.0 * np.pi * 2.0**-24)
    z = np.concatenate([r * np.cos(t), r * np.sin(t)], axis=1)[0, :dim].astype(np.float64)  # Box-Muller
    v = z + mu * np.sqrt(dim)  # sqrt(d)·(mu + g), g ~ N(0, I/d)
    return v * (clip / np.sqrt(_row_sq(v[None])[0]))  # the same float inner product


def test_client_vectors_equal_per_client_reference_bit_for_bit():
    ids = [0, 5, 3, 10**6, 7, 5]  # unsorted, repeated and a large id: each row depends on its id only
    got = client_vectors(9, ids, 37, 2.5)
    want = np.stack([_reference_client_vector(9, c, 37, 2.5) for c in ids])
    assert np.array_equal(got, want)
    assert np.allclose(np.linalg.norm(got, axis=1), 2.5)
    assert not np.array_equal(got[0], got[1])
    assert np.array_equal(client_vectors(9, [3], 37, 2.5)[0], got[2])  # independent of the batch


def test_client_normals_are_standard_normal():
    # Box-Muller on 24-bit uniforms: 2 * 10^5 values (200 clients, d = 1000) against N(0, 1) by
    # Kolmogorov-Smirnov, alpha = 1e-6: a correct sampler fails with probability 1e-6 (for this fixed seed the
    # test is deterministic; the rate is over seeds). The largest |z| is at most sqrt(2 * 24 ln 2) = 5.77.
    from scipy import stats

    from simulations.tasks.mean import client_normals

    z = client_normals(4, np.arange(200), 1000)[:, :1000].astype(np.float64)
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-6
    assert np.abs(z).max() <= np.sqrt(2 * 24 * np.log(2)) + 1e-6
    # uncorrelated across clients and coordinates: the 200 x 200 Gram matrix of the rows is about 1000 I
    # (off-diagonal entries ~ N(0, 1000); 6 standard deviations: false-failure rate below 2e4 * 2e-9)
    gram = z @ z.T / 1000
    assert np.abs(gram - np.diag(np.diag(gram))).max() < 6 / np.sqrt(1000)


def test_client_normals_take_the_same_halves_on_a_big_endian_platform(monkeypatch):
    # the explicit low/high split used where a uint32 view would read the halves the other way round
    import types

    from simulations.tasks import mean

    want = mean.client_normals(3, [0, 7, 2**33], 37)
    monkeypatch.setattr(mean, "sys", types.SimpleNamespace(byteorder="big"))
    assert np.array_equal(mean.client_normals(3, [0, 7, 2**33], 37), want)


def test_drop_stages_chunked_equal_one_call_per_client_reference(monkeypatch):
    monkeypatch.setattr(aggregators, "_ROWS", 7)  # force several chunks, with a ragged last one
    n, p = 53, 0.3
    got = aggregators.draw_drop_stages(n, p, np.random.default_rng(4))
    coins = np.random.default_rng(4).random((n, len(aggregators.STAGES))) < p  # the former single draw
    want = []
    for row in coins:  # the former per-client loop: first dropped stage wins
        hits = [s for s, c in enumerate(row) if c]
        want.append(hits[0] if hits else aggregators.NO_DROP)
    assert got.tolist() == want
    assert 0 < sum(w < aggregators.NO_DROP for w in want) < n  # both outcomes occur
    sets = aggregators.draw_dropouts(list(range(100, 100 + n)), p, np.random.default_rng(4))
    assert sets == {s: {100 + i for i, w in enumerate(want) if w == k} for k, s in enumerate(aggregators.STAGES)}


def test_checkin_chunked_equals_one_call(monkeypatch):
    cfg = small_config(population={"clients": 95, "checkin": 0.4})
    monkeypatch.setattr(runner, "_DRAW_CHUNK", 10)
    got = select_participants(cfg, 11, 3)
    coins = runner._round_rng(11, 3, 0).random(95) < 0.4
    assert got.tolist() == [i for i in range(95) if coins[i]]


@pytest.mark.parametrize("per_client_noise", [False, True])
@pytest.mark.parametrize("generator", ["aes-counter", "pcg64"])
def test_ideal_round_equals_per_block_reference(generator, per_client_noise):
    # dropout small enough for the active-mode threshold t > 2n/3 to survive the three dropout stages
    cfg = small_config(
        population={"clients": 700, "checkin": 0.8, "dropout": 0.05},
        secagg={"bits": 40},
        rng=generator,
    )
    root, r = 11, 2
    p = plan(cfg, root)
    ra = aggregate_round(cfg, p, root, r, None, InProcessExecutor(), "ideal", aggregate_noise=not per_client_noise)
    assert ra.spec.client_noise is per_client_noise
    assert len(ra.ids) > 2 * BLOCK  # several blocks, a ragged last one
    codec = make_codec(p.dim, 40, cfg.privacy.clip, p.scale, ra.spec.rotation_seed, cfg.privacy.beta)
    included = set(ra.included.tolist())
    total, truth = 0 * np.zeros(p.padded_dim, dtype=object), np.zeros(p.dim)
    for b, lo in enumerate(range(0, len(ra.ids), BLOCK)):
        seq = np.random.SeedSequence(root, spawn_key=(1, r, 4, b))
        rng = np.random.Generator(AESCounter(seq) if generator == "aes-counter" else np.random.PCG64(seq))
        ids = ra.ids[lo : lo + BLOCK].tolist()
        x = np.stack([_reference_client_vector(root, c, p.dim, cfg.privacy.clip) for c in ids])
        noise = None
        if per_client_noise:
            noise = sample_discrete_gaussian(p.sigma_int, len(ids) * p.padded_dim, rng=rng).reshape(len(ids), -1)
        rows = codec.encode(x, noise=noise, rng=rng)
        for c, row, xi in zip(ids, rows, x, strict=True):
            if c in included:
                total = total + np.array([int(v) for v in row], dtype=object)  # Python ints: no wrap
                truth += xi
    if not per_client_noise:  # the included clients' noise as one N_Z(0, K sigma^2) draw from stream (1, r, 5)
        seq = np.random.SeedSequence(root, spawn_key=(1, r, 5))
        rng = np.random.Generator(AESCounter(seq) if generator == "aes-counter" else np.random.PCG64(seq))
        # in groups of g clients, g = floor(1e12 / sigma^2) (at least 1), so that sigma * sqrt(g) <= 1e6
        k, g = len(included), max(1, int(1e12 / p.sigma_int**2 * (1 - 1e-9)))
        for size in [g] * (k // g) + ([k % g] if k % g else []):
            draw = sample_discrete_gaussian(p.sigma_int * np.sqrt(size), p.padded_dim, rng=rng)
            total = total + np.array([int(v) for v in draw], dtype=object)
    assert [int(v) for v in ra.aggregate] == [int(v) % (1 << 40) for v in total]
    assert np.allclose(ra.truth, truth, rtol=0, atol=1e-9)
    assert 0 < len(included) < len(ra.ids)


def test_default_generator_is_aes_counter_and_pcg64_on_request():
    assert isinstance(block_rng(1, 1, 0).bit_generator, AESCounter)
    assert isinstance(block_rng(1, 1, 0, "pcg64").bit_generator, np.random.PCG64)
    assert small_config().rng == "aes-counter"
    with pytest.raises(ConfigError, match="'rng'.*'mt19937'"):
        small_config(rng="mt19937")


def test_generators_give_different_but_reproducible_rounds():
    sums = {}
    for generator in ("aes-counter", "pcg64"):
        cfg = small_config(population={"clients": 40}, secagg={"bits": 30}, rng=generator)
        p = plan(cfg, 5)
        a = aggregate_round(cfg, p, 5, 1, None, InProcessExecutor(), "ideal").aggregate
        b = aggregate_round(cfg, p, 5, 1, None, InProcessExecutor(), "ideal").aggregate
        assert np.array_equal(a, b)
        sums[generator] = a
    assert not np.array_equal(sums["aes-counter"], sums["pcg64"])


def test_cli_parser_imports_no_numerical_stack():
    code = (
        "import sys, simulations.cli as c; c.build_parser(); "
        "print(sorted(m for m in ('numpy', 'scipy', 'galois', 'numba', 'randomgen') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tune_allocator_is_once_per_process_and_harmless():
    from simulations.clients import tune_allocator

    first = tune_allocator()
    assert isinstance(first, bool) and tune_allocator() is first  # cached: applied once
    if sys.platform.startswith("linux"):
        assert first  # glibc's mallopt accepted both settings
    assert np.ones((128, 1024)).sum() == 128 * 1024  # allocations still work
