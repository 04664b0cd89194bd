"""The adversary in the tests: random malicious-server strategies against real rounds, checked by the coalition
invariant (tests/adversary/harness.py), and one regression test per attack found by hand.

Threat model (docs/secure-aggregation.md): an active server colluding with c clients, c within what the
thresholds tolerate: full graph c < n/3 and c < 2t - n; SecAgg+ c < 2t - (k + 1) colluders anywhere in the
roster (so even a neighbourhood holding all of them cannot be split).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversary.harness import (
    STAGES,
    AdmitOnly,
    ClaimSurvivors,
    CountInflation,
    Deviation,
    Duplicate,
    Equivocate,
    Exclude,
    HandPickRoster,
    InjectUplink,
    Misroute,
    Reorder,
    Replay,
    Rewrite,
    RewriteField,
    Scenario,
    Tamper,
    Withhold,
    check_invariant,
    coalition_knowledge,
    learnable_sums,
    oracle_sum,
    run_round,
)
from protocols import messages as m
from secagg_dp.errors import ParameterError
from secagg_dp.noise.add_then_remove import NoiseSpec

F = frozenset
NOISES = (None, NoiseSpec(60.0, 0.25), NoiseSpec(60.0, 0.5, "every"))


# -- strategies ---------------------------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A round within the threat model: full graph (t = floor(2n/3) + 1, or one more) or SecAgg+ (k in {4, 6},
    t from the active floor up to k + 1), colluders within the thresholds, dropouts at every stage."""
    if draw(st.booleans()):
        k, n = None, draw(st.integers(6, 10))
        t = min(n, 2 * n // 3 + 1 + draw(st.integers(0, 1)))
        cmax = min(2 * t - n - 1, (n - 1) // 3)
    else:
        k = draw(st.sampled_from([4, 6]))
        n = draw(st.integers(k + 3, 14))
        t = draw(st.integers(k // 2 + 1, k + 1))
        cmax = min(2 * t - (k + 1) - 1, (n - 1) // 3)
    ids = list(range(1, n + 1))
    colluders = F(draw(st.lists(st.sampled_from(ids), max_size=max(0, cmax), unique=True)))
    stage_of = draw(
        st.dictionaries(st.sampled_from(ids), st.sampled_from(STAGES), max_size=max(1, n // 4)),
    )
    dropouts = {s: F(c for c, s2 in stage_of.items() if s2 == s) for s in STAGES}
    return Scenario(
        n=n,
        threshold=t,
        neighbours=k,
        noise=draw(st.sampled_from(NOISES)),
        colluders=colluders,
        dropouts={s: c for s, c in dropouts.items() if c},
        seed=draw(st.integers(0, 2**16)),
    )


def _subset(ids: list[int]) -> st.SearchStrategy[frozenset[int]]:
    return st.lists(st.sampled_from(ids), min_size=1, max_size=max(1, len(ids) // 2), unique=True).map(F)


def _unmask_rewrite(kind: str) -> object:
    """Rewrites of an unmask request: ask for another noise group, call a survivor dropped, drop the signatures."""

    def fn(req: m.UnmaskRequest, run: object, to: int) -> m.UnmaskRequest:
        if kind == "group":
            return dataclasses.replace(req, noise_group=1)
        if kind == "drop-one" and len(req.survivors) > 1:
            gone = next(v for v in req.survivors if v != to)
            return dataclasses.replace(
                req, survivors=tuple(v for v in req.survivors if v != gone), dropped=tuple(sorted({*req.dropped, gone}))
            )
        if kind == "no-signatures":
            return dataclasses.replace(req, signers=(), signatures=np.zeros((0, m.SIG_LEN), np.uint8))
        return req

    return fn


@st.composite
def deviations(draw: st.DrawFn, sc: Scenario) -> Deviation:
    """One deviation of the malicious server, any kind, at any stage, aimed at random clients."""
    ids = list(sc.ids)
    stage = draw(st.sampled_from(STAGES))
    who = draw(_subset(ids))
    kind = draw(
        st.sampled_from(
            [
                "withhold",
                "duplicate",
                "reorder",
                "replay",
                "misroute",
                "tamper",
                "exclude",
                "claim",
                "split",
                "inflate",
                "equivocate",
                "unmask",
                "threshold",
                "admit",
                "swap-boxes",
                "swap-senders",
                "roster-keys",
                "near-ids",
            ]
        )
    )
    if kind == "withhold":
        return Withhold(stage, targets=who)
    if kind == "duplicate":
        return Duplicate(stage, targets=who)
    if kind == "reorder":
        return Reorder(stage, seed=draw(st.integers(0, 99)))
    if kind == "replay":
        return Replay(stage, source=draw(st.sampled_from(STAGES[: max(1, STAGES.index(stage))])), targets=who)
    if kind == "misroute":
        a, b = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=2, unique=True))
        return Misroute(stage, pairs=((a, b),))
    if kind == "tamper":
        return Tamper(stage, offset=draw(st.integers(-300, 300)), targets=who)
    if kind == "exclude":
        return Exclude(draw(st.sampled_from(STAGES[1:])), clients=who)
    if kind == "claim":
        return ClaimSurvivors("consistency", add=draw(_subset(ids)), remove=draw(_subset(ids)), targets=who)
    if kind == "split":  # tell one group that ``gone`` dropped and the rest that everyone survived
        gone = draw(_subset(ids))
        return ClaimSurvivors("consistency", remove=gone, targets=who)
    if kind == "inflate":
        return CountInflation(delta=draw(st.integers(-3, 4)), targets=who if draw(st.booleans()) else None)
    if kind == "equivocate":
        return Equivocate("consistency", field="count", values_by_group=((who, sc.n), (F(ids) - who, sc.n - 1)))
    if kind == "unmask":
        fn = _unmask_rewrite(draw(st.sampled_from(["group", "drop-one", "no-signatures"])))
        return Rewrite("unmasking", fn=fn, targets=who)  # type: ignore[arg-type]
    if kind == "threshold":
        return RewriteField("advertise_keys", field="threshold", fn=lambda t, run, to: max(2, t - 1), targets=who)
    if kind == "admit":
        return AdmitOnly(clients=F(ids) - who)
    if kind == "swap-senders":  # boxes attributed to the wrong senders
        return RewriteField("masked_input", field="senders", fn=lambda v, run, to: tuple(reversed(v)), targets=who)
    if kind == "roster-keys":  # key substitution: the channel keys of the roster's rows shown in reverse order
        return RewriteField("share_keys", field="enc_pks", fn=lambda a, run, to: a[::-1].copy(), targets=who)
    if kind == "near-ids":  # the survivor list names other ids at the client's two-hop positions
        return RewriteField("consistency", field="near_ids", fn=lambda a, run, to: a + 1, targets=who)
    return RewriteField("masked_input", field="boxes", fn=lambda b, run, to: tuple(reversed(b)), targets=who)


@st.composite
def attacks(draw: st.DrawFn) -> tuple[Scenario, list[Deviation]]:
    sc = draw(scenarios())
    return sc, draw(st.lists(deviations(sc), min_size=1, max_size=3))


def _check(sc: Scenario, devs: list[Deviation], *, strict_noise: bool = False) -> None:
    run = run_round(sc, devs)
    assert check_invariant(run, strict_noise=strict_noise) == [], (sc, devs, run.refusals[:5], run.aborted)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attacks())
def test_no_strategy_breaks_the_coalition_invariant(attack: tuple[Scenario, list[Deviation]]) -> None:
    _check(*attack)


@pytest.mark.slow
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attacks())
def test_no_strategy_breaks_the_coalition_invariant_many(attack: tuple[Scenario, list[Deviation]]) -> None:
    """The larger budget also holds the enforcement bound of docs/noise-enforcement.md (``strict_noise``): no
    learnable sum loses noise groups beyond what the real dropouts allow, up to the documented residual."""
    _check(*attack, strict_noise=True)


# -- the harness itself can fail ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("neighbours", "t", "noise"), [(None, 7, None), (6, 5, NOISES[1]), (8, 6, NOISES[2])])
def test_honest_round_releases_exactly_the_sum_of_the_survivors(neighbours, t, noise) -> None:
    """No deviation: the engine's sum is the Python-integer oracle over its survivors (inputs plus the noise
    each keeps after the honest removal), and the only sum the coalition can unmask is over the honest survivors."""
    sc = Scenario(n=10, threshold=t, neighbours=neighbours, noise=noise, colluders=F({2}), seed=4)
    sc = dataclasses.replace(sc, dropouts={"masked_input": F({5}), "unmasking": F({7})})
    run = run_round(sc)
    assert run.aborted is None and run.outcome_survivors == F(sc.ids) - {5}
    assert check_invariant(run) == []
    lowest = dict.fromkeys(run.outcome_survivors, min(run.outcome_removed) if run.outcome_removed else None)
    assert run.outcome_aggregate.tolist() == oracle_sum(run, sorted(run.outcome_survivors), lowest)
    assert learnable_sums(run, coalition_knowledge(run)) == [F(sc.ids) - {2, 5}]


def test_the_invariant_catches_a_split_beyond_the_threat_model() -> None:
    """c = 2t - n = 4 colluders at (n, t) = (8, 6) (the documented limit): the split attack of Bonawitz et al.
    2017, Sec. 6 gives the coalition t shares of both of client 1's secrets, and the check says so."""
    sc = Scenario(n=8, threshold=6, colluders=F({5, 6, 7, 8}), seed=2)
    run = run_round(sc, [ClaimSurvivors("consistency", remove=F({1}), targets=F({3, 4}))])
    assert check_invariant(run) == ["coalition holds t shares of both b and sk of honest client 1"]


def test_the_invariant_catches_a_sum_over_too_few_honest_clients() -> None:
    """Two of seven clients drop before their masked input: the sum covers 5 honest clients, enough for t = 5 but
    not for honest clients that would enforce t = 6; the same run, judged against t = 6, is reported."""
    run = run_round(Scenario(n=7, threshold=5, dropouts={"masked_input": F({1, 2})}, seed=3))
    assert check_invariant(run) == [] and run.outcome_survivors == F({3, 4, 5, 6, 7})
    run.scenario = dataclasses.replace(run.scenario, threshold=6)
    assert check_invariant(run) == [
        "coalition can unmask a sum of 5 < t - c = 6 honest clients [3, 4, 5, 6, 7]",
        "engine released a sum over 5 < 6 honest clients",
    ]


# -- regressions: one test per attack found by hand ---------------------------------------------------------------
N_ENF, SPEC = 12, NoiseSpec(60.0, 0.25)  # D = 3, log2 levels 0, 1, 2, 3


def _revealed_below(run, allowed_from: int | None) -> dict[int, int]:
    """Honest responders that revealed shares of a noise group below ``allowed_from`` (None: none allowed)."""
    out = {}
    for h, resp in run.responses.items():
        g = run.requests[h].noise_group
        if h in run.honest and resp.noise_owners and (allowed_from is None or g < allowed_from):
            out[h] = g
    return out


@pytest.mark.parametrize("neighbours,t", [(None, 9), (6, 5)], ids=["full", "secagg+"])
@pytest.mark.parametrize("variant", ["count=N", "count>N", "equivocated", "beyond-tolerance"])
def test_count_inflation_with_add_then_remove_fails(neighbours, t, variant) -> None:
    """Finding: the SecAgg+ survivor count was a bare field next to the bitmap's commitment, so a server could sign
    count = N (or more) with the honest bitmap and have every client reveal all noise groups. With d real dropouts
    before the masked input only the groups above d may be removed; beyond the tolerance D none."""
    drops = F({3, 4, 9, 10}) if variant == "beyond-tolerance" else F({3, 4})
    sc = Scenario(n=N_ENF, threshold=t, neighbours=neighbours, noise=SPEC, dropouts={"masked_input": drops}, seed=3)
    devs: list[Deviation] = {
        "count=N": [CountInflation(value=N_ENF)],
        "count>N": [CountInflation(value=N_ENF + 5)],
        "equivocated": [
            Equivocate("consistency", field="count", values_by_group=((F(sc.ids) - {1}, N_ENF), (F({1}), N_ENF - 1)))
        ],
        "beyond-tolerance": [CountInflation(delta=2)],
    }[variant]
    run = run_round(sc, devs)
    allowed = SPEC.schedule(N_ENF).removable(len(drops))
    assert check_invariant(run, strict_noise=True) == []
    assert _revealed_below(run, min(allowed) if allowed else None) == {}


def test_hand_picked_small_roster_is_refused() -> None:
    """Finding: an active SecAgg+ client with no stated population took any roster of k + 2 clients. n = 40 invited
    (5 colluders: 12.5 %), (k, t) = (6, 5); the server admits the victim, the 5 colluders and 2 honest clients,
    ground until the colluders are all the victim's neighbours: they hold t shares of b_1 and sk_1. A client
    either must state its population (construction refuses None) or refuses the roster."""
    sc = Scenario(n=40, threshold=5, neighbours=6, colluders=F({2, 3, 4, 5, 6}), seed=5, min_roster=None, dim=2)
    attack = [HandPickRoster(victim=1, size=8)]
    try:
        run = run_round(sc, attack)
    except ParameterError as e:
        assert "min_roster" in str(e)
    else:
        assert check_invariant(run) == []
        assert 1 in run.refused("share_keys") and 1 not in run.share_keys
    stated = run_round(dataclasses.replace(sc, min_roster="population"), attack)  # a client that states it
    assert 1 in stated.refused("share_keys") and check_invariant(stated) == []


def test_masked_input_replayed_from_an_earlier_execution_is_refused() -> None:
    """Finding: with a caller-fixed round id, a MaskedInput recorded in an earlier execution (other keys) was
    accepted in its sender's name and spoiled the sum. It must be refused and the sum over the others exact."""
    rid = bytes(range(16))
    first = run_round(Scenario(n=7, threshold=5, seed=1, round_id=rid))
    old = dict(first.uplink["masked_input"])[3]
    replay = InjectUplink("masked_input", sender=3, payload=old)
    run = run_round(Scenario(n=7, threshold=5, seed=2, round_id=rid), [replay])
    assert check_invariant(run) == []
    assert run.aborted is None and 3 not in run.outcome_survivors
    assert any("from 3" in r for r in run.server_reports)


def _pad_roster(roster: m.KeyRoster, run: object, to: int) -> m.KeyRoster:
    """The full-graph roster with 300 more well-formed (unsigned) rows: its size field alone says refuse (t = 5
    is unsafe for 307 share holders), yet it is within the byte cap of a client expecting up to 2^20 clients."""
    extra = 300
    pad = lambda a: np.vstack([a, np.full((extra, a.shape[1]), 9, np.uint8)])  # noqa: E731
    return dataclasses.replace(
        roster,
        size=roster.size + extra,
        indices=roster.indices + tuple(range(roster.size, roster.size + extra)),
        ids=roster.ids + tuple(range(1000, 1000 + extra)),
        enc_pks=pad(roster.enc_pks),
        mask_pks=pad(roster.mask_pks),
        signatures=pad(roster.signatures),
    )


def _pad_signers(req: m.UnmaskRequest, run: object, to: int) -> m.UnmaskRequest:
    extra = tuple(v for v in sorted(run.clients) if v not in req.signers)  # every roster member signs
    signers = tuple(sorted(req.signers + extra))
    return dataclasses.replace(req, signers=signers, signatures=np.full((len(signers), m.SIG_LEN), 5, np.uint8))


ROSTER = Scenario(n=7, threshold=5, seed=6, dim=2, max_clients=1 << 20)  # the default population bound
UNMASK = Scenario(n=40, threshold=4, neighbours=4, seed=6, dim=2)  # two-hop window: 2k + 1 = 9 signers


@pytest.mark.parametrize(
    ("sc", "stage", "fn"),
    [(ROSTER, "share_keys", _pad_roster), (UNMASK, "unmasking", _pad_signers)],
    ids=["roster", "unmask"],
)
def test_oversized_roster_and_unmask_request_refused_by_size_before_parsing(monkeypatch, sc, stage, fn) -> None:
    """Finding: a client parsed a roster whose size field alone decides a refusal (within its byte cap: a
    65,505-entry full-graph roster took seconds), and a SecAgg+ unmask request with a signature from every
    roster member, far above the signers of its two-hop window it can use. Both must be refused on their size
    and count fields, before the body is parsed."""
    parsed: list[bytes] = []
    real = m.decode
    monkeypatch.setattr(m, "decode", lambda data: (parsed.append(bytes(data)), real(data))[1])
    run = run_round(sc, [Rewrite(stage, fn=fn, targets=F({1}))])  # type: ignore[arg-type]
    (sent,) = [d.payload for d in run.delivered[stage] if d.to == 1]
    assert 1 in run.refused(stage)
    assert sent not in parsed
