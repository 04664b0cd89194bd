"""run_secagg_round: bit-exact sums under dropouts at every stage, clean aborts, SecAgg+, reproducibility."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from protocols import STAGES, run_secagg_round
from protocols.security import min_threshold
from secagg_dp.errors import AbortError, ParameterError, ProtocolError

MODES = ("active", "semi-honest")


def _inputs(n, dim, bits, seed=0):
    rng = np.random.default_rng(seed)
    return {cid: rng.integers(0, 1 << bits, size=dim, dtype=np.uint64) for cid in range(10, 10 + n)}


def _oracle(inputs, survivors, bits):
    # Exact sum with Python ints, reduced mod 2^bits (independent of numpy's uint64 wrap-around).
    dim = len(next(iter(inputs.values())))
    return [sum(int(inputs[c][j]) for c in survivors) % (1 << bits) for j in range(dim)]


def test_api_exported():
    import protocols

    assert "run_secagg_round" in protocols.__all__ and protocols.run_secagg_round is run_secagg_round


@pytest.mark.parametrize("security,t", [("active", 5), ("semi-honest", 4)])
def test_no_dropouts_full_sum(security, t):
    inp = _inputs(6, 17, 20)
    res = run_secagg_round(inp, bits=20, threshold=t, security=security, seed=1)
    assert res.survivors == frozenset(inp) and res.aggregate.dtype == np.uint64
    assert res.aggregate.tolist() == _oracle(inp, inp, 20)


@pytest.mark.parametrize("security", MODES)
@pytest.mark.parametrize("neighbours", [None, 4])
@pytest.mark.parametrize("stage", STAGES)
def test_dropout_at_each_stage(stage, neighbours, security):
    inp = _inputs(9, 11, 16)
    gone = {11, 15}
    t = 7 if (security, neighbours) == ("active", None) else 3  # active full graph: t > 2n/3
    res = run_secagg_round(
        inp, bits=16, threshold=t, dropouts={stage: gone}, neighbours=neighbours, security=security, seed=2
    )
    counted = stage in ("consistency", "unmasking")  # a client that sent its masked input is summed even if it leaves
    assert res.survivors == (frozenset(inp) if counted else frozenset(inp) - gone)
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, 16)
    if stage == "masked_input":
        assert res.dropped == frozenset(gone)


def test_dropouts_at_all_stages_together_semi_honest():
    inp = _inputs(12, 5, 32)
    drops = {"advertise_keys": {10}, "share_keys": {11}, "masked_input": {12, 13}, "unmasking": {14}}
    res = run_secagg_round(inp, bits=32, threshold=5, dropouts=drops, security="semi-honest", seed=3)
    assert res.survivors == frozenset(inp) - {10, 11, 12, 13}
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, 32)


def test_dropouts_at_all_stages_together_active():
    # n = 15, t = 11 = floor(2n/3) + 1 tolerates 4 dropouts in all.
    inp = _inputs(15, 5, 32)
    drops = {"advertise_keys": {10}, "share_keys": {11}, "masked_input": {12}, "consistency": {13}}
    res = run_secagg_round(inp, bits=32, threshold=11, dropouts=drops, seed=3)
    assert res.survivors == frozenset(inp) - {10, 11, 12}
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, 32)
    with pytest.raises(AbortError):  # one more dropout leaves 10 < t unmasking responses
        run_secagg_round(inp, bits=32, threshold=11, dropouts={**drops, "unmasking": {14}}, seed=3)
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, 32)


@pytest.mark.parametrize("security", MODES)
@pytest.mark.parametrize("stage", STAGES)
def test_fewer_than_t_aborts_cleanly(stage, security, monkeypatch):
    from protocols import server as server_mod

    seen = []
    orig = server_mod.SecAggServer._reconstruct_all
    monkeypatch.setattr(server_mod.SecAggServer, "_reconstruct_all", lambda self, *a: seen.append(1) or orig(self, *a))
    inp = _inputs(5, 4, 8)
    with pytest.raises(AbortError):
        run_secagg_round(inp, bits=8, threshold=4, dropouts={stage: {10, 11}}, security=security, seed=4)
    assert seen == []  # nothing was reconstructed


def test_abort_is_a_protocol_error():
    assert issubclass(AbortError, ProtocolError)


@pytest.mark.parametrize("security", MODES)
@pytest.mark.parametrize("k", [2, 3, 6])
def test_secaggplus_exact_with_dropouts(k, security):
    inp = _inputs(15, 9, 24)
    t = min_threshold(k + 1, neighbours=k, security=security)
    # Pinned round id: the graph (seeded by the roster's keys) is then fixed, and with k = 2 or 3 some graphs
    # would leave a neighbourhood below t after these two dropouts.
    res = run_secagg_round(
        inp,
        bits=24,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": {12, 20}},
        security=security,
        seed=5,
        round_id=bytes(16),
    )
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, 24)
    assert res.survivors == frozenset(inp) - {12, 20}


def _masked_inputs(**kwargs):
    """The MaskedInput bytes of every client in one run (captured on the wire, sorted)."""
    from protocols import client as client_mod

    ys = []
    orig = client_mod.SecAggClient._on_bundle
    mp = pytest.MonkeyPatch()
    mp.setattr(client_mod.SecAggClient, "_on_bundle", lambda self, msg: ys.append(orig(self, msg)) or ys[-1])
    try:
        res = run_secagg_round(_inputs(5, 8, 12), bits=12, threshold=4, **kwargs)
    finally:
        mp.undo()
    return sorted(ys), res


def test_seeded_runs_reproducible_with_pinned_round_id():
    rid = bytes(range(16))
    first, r1 = _masked_inputs(seed=7, round_id=rid)
    again, r2 = _masked_inputs(seed=7, round_id=rid)
    other, _ = _masked_inputs(seed=8, round_id=rid)
    assert first == again  # same seed and round id: identical masked inputs, bit for bit
    assert first != other
    assert r1.aggregate.tolist() == r2.aggregate.tolist()


def test_seeded_runs_draw_fresh_round_ids():
    # Same seed, no pinned round id: the aggregate is reproducible, but every message differs (the round
    # id is in each header and in the derivation of every per-round key), so nothing carries over.
    first, r1 = _masked_inputs(seed=7)
    again, r2 = _masked_inputs(seed=7)
    assert first[0][4:20] != again[0][4:20]  # header bytes 4..19: the round id
    assert not set(first) & set(again)
    assert r1.aggregate.tolist() == r2.aggregate.tolist() == _oracle(_inputs(5, 8, 12), r1.survivors, 12)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(bits=63, threshold=3),
        dict(bits=8, threshold=1),
        dict(bits=8, threshold=5),
        dict(bits=8, threshold=3, dropouts={"unmask": {10}}),
        dict(bits=8, threshold=3, dropouts={"share_keys": {99}}),
        dict(bits=8, threshold=3, dropouts={"share_keys": {10}, "unmasking": {10}}),
        dict(bits=8, threshold=4, neighbours=2),
        dict(bits=8, threshold=3, seed=-1),
        dict(bits=8, threshold=3, security="malicious"),
        dict(bits=8, threshold=3, round_id=b"short"),
        dict(bits=8, threshold=2),  # active full graph: t > 2n/3 = 2.67
        dict(bits=8, threshold=2, neighbours=3),  # active SecAgg+: t > (k + 1)/2 = 2
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ParameterError):
        run_secagg_round(_inputs(4, 3, 8), **kwargs)


def test_threshold_error_names_the_argument_and_the_fix():
    with pytest.raises(ParameterError, match=r"'threshold' must be >= 67 .*semi-honest"):
        run_secagg_round(_inputs(100, 1, 8), bits=8, threshold=51)


def test_bad_inputs():
    with pytest.raises(ParameterError):
        run_secagg_round({1: np.array([256], dtype=np.uint64), 2: np.array([0], dtype=np.uint64)}, bits=8, threshold=2)
    with pytest.raises(ParameterError):
        run_secagg_round({1: np.array([1.0]), 2: np.array([0.0])}, bits=8, threshold=2)
    with pytest.raises(ParameterError):
        run_secagg_round({1: np.zeros(2, np.uint64), 2: np.zeros(3, np.uint64)}, bits=8, threshold=2)


@st.composite
def _scenarios(draw):
    n = draw(st.integers(2, 9))
    security = draw(st.sampled_from(MODES))
    bits = draw(st.sampled_from([8, 13, 31, 32, 33, 48, 62]))
    dim = draw(st.integers(1, 12))
    neighbours = draw(st.one_of(st.none(), st.integers(2, n + 1)))
    full = neighbours is None or neighbours >= n - 1
    holders = n if full else neighbours + 1
    t = draw(
        st.integers(
            min(holders, min_threshold(holders, neighbours=None if full else neighbours, security=security)), holders
        )
    )
    stage_of = draw(st.lists(st.sampled_from((None,) + STAGES), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32))
    return n, max(t, 2), bits, dim, neighbours, stage_of, seed, security


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenarios())
# a SecAgg+ client whose neighbours dropped refuses to mask (formerly a rare flaky failure of this test)
@example(
    (
        8,
        2,
        33,
        11,
        2,
        ["share_keys", "advertise_keys", None, "advertise_keys", None, "share_keys", None, "advertise_keys"],
        1,
        "semi-honest",
    )
)
@example((6, 2, 8, 1, 2, ["unmasking", None, "share_keys", "share_keys", None, None], 309361680, "active"))
@pytest.mark.slow  # over ~5 s: CI only, not the quick loop
def test_property_exact_sum_or_abort(scenario):
    n, t, bits, dim, k, stage_of, seed, security = scenario
    inp = _inputs(n, dim, bits, seed=seed % 1000)
    ids = sorted(inp)
    drops: dict[str, set[int]] = {}
    for cid, s in zip(ids, stage_of, strict=True):
        if s is not None:
            drops.setdefault(s, set()).add(cid)
    order = {s: i for i, s in enumerate(STAGES)}

    def alive_at(stage):
        return {c for c, s in zip(ids, stage_of, strict=True) if s is None or order[s] > order[stage]}

    counted = alive_at("masked_input")
    try:
        # the round id is pinned so that a failing example replays (by default every run draws a fresh one)
        res = run_secagg_round(
            inp,
            bits=bits,
            threshold=t,
            dropouts=drops,
            neighbours=k,
            security=security,
            seed=seed,
            round_id=seed.to_bytes(16, "big"),
        )
    except AbortError:
        if k is None or k >= n - 1:
            # Full graph: abort exactly when some stage has fewer than t clients (U4 is the smallest set).
            assert len(alive_at("unmasking")) < t
        return
    if k is None or k >= n - 1:
        assert res.survivors == frozenset(counted)
    else:
        # SecAgg+: a live client whose surviving share holders fell below t refuses to send its masked input
        # (its secrets could not be recovered); it must say so, and every other live client is counted.
        assert res.survivors <= frozenset(counted)
        for c in frozenset(counted) - res.survivors:
            assert any(r.startswith(f"masked_input: client {c} refused") and "< threshold" in r for r in res.reports)
    assert len(alive_at("unmasking")) >= t
    assert res.aggregate.tolist() == _oracle(inp, res.survivors, bits)
