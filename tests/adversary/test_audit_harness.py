"""The audit catches a noise-stripping server in real protocol rounds (tests/adversary/harness.py).

Deployment: SecAgg+ (Bell et al. 2020), n = 21 clients, degree k = 6 (each secret has 7 holders, a ring window
of offsets -3..3), threshold t = 4, add-then-remove noise (Jiang, Wang & Chen 2024; log2 groups, tolerance
0.98: boundaries 0, 1, 2, 4, 8, 16, 20). In every round 9 clients drop before the masked input, three of
every seven ring positions, so every holder window keeps exactly t = 4 survivors and the round completes.
With d = 9 real dropouts only group 6 (levels 16..20) may be removed: each honest client keeps variance
mu / (21 - 16) = mu / 5. The active server (no colluders) can unmask the sums of the survivor blocks between
dropped runs (4 clients each, t of them: the SecAgg+ residual of docs/secure-aggregation.md); the canary,
client 1, is in one of them.

Neighbouring datasets (client level, replace-one on one coordinate): the canary's input has +a or -a on
coordinate j (a = 4, so the difference has L1 = L2 norm 2a = 8), every other client holds zero. Each round
carries ``dim`` such canary coordinates with signs drawn at random, half of each: all clients' noise is
independent across coordinates (one Skellam draw per coordinate and group from the seeds), and the round's
dropouts are fixed, so the coordinates are i.i.d. trials of the same one-coordinate mechanism (the other
coordinates are independent of coordinate j's sign, so a test on coordinate j alone is a test of that pair,
averaged over the others' signs; the (epsilon, delta) inequality survives the average).

Observer: the active server of the harness, no colluders, with the strict noise guarantee of
docs/noise-enforcement.md: any sum it unmasks keeps, per honest client, every group the real dropouts do not
allow removing. Certificate: Skellam of variance h mu / 5 (h = 4 honest clients in the canary's block) at
sensitivity 2a (Agarwal, Kairouz & Liu 2021, Thm 3.5, via :class:`secagg_dp.accounting.Skellam` and its RDP
conversion), delta = 1e-3. The observer's score is the EXACT log likelihood ratio of its unmasked block sum,
a symmetric Skellam of the variance it knows is left (:func:`secagg_dp.audit.llr.skellam_log_pmf`).

The broken deployment: clients patched to trust the server's survivor count (test-only monkeypatch of
``SecAggClient._on_survivor_list``, reproducing the pre-fix behaviour where the count was a bare field next
to the bitmap's commitment): the client verifies and signs the survivor list exactly as today with the count
its committed tree gives, then records the server's stated count as ``_signed_count``, the |U3| that bounds
which noise groups it reveals. With :class:`~tests.adversary.harness.CountInflation` (count = N = 21, honest
bitmap) the server's request for group 1 is honoured, every group is removed and each client keeps only
level 0, mu / 21: variance 4.2 times smaller. Unpatched clients refuse the inflated count and the rounds abort.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pytest

from protocols.client import SecAggClient
from secagg_dp.accounting import Skellam
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.audit import audit_from_scores
from secagg_dp.audit.llr import exact_llr, skellam_log_pmf
from secagg_dp.noise.add_then_remove import NoiseSpec

from .harness import (
    CountInflation,
    Run,
    Scenario,
    _kept,
    _unmask,
    check_invariant,
    coalition_knowledge,
    learnable_sums,
    run_round,
)

N, K, T, A, DELTA = 21, 6, 4, 4, 1e-3
MU = 320.0  # the honest block sum keeps 4 mu / 5 = 256 = (2a / 0.5)^2: a shift of half a standard deviation
SPEC = NoiseSpec(MU, 0.98)
CANARY = 1
F = frozenset


def _certificate(variance: float) -> float:
    """epsilon at DELTA of the one-coordinate Skellam mechanism of total variance ``variance``, sensitivity 2a
    (Agarwal, Kairouz & Liu 2021, Thm 3.5; RDP -> DP by :func:`rdp_to_dp`)."""
    orders = np.arange(2, 512)
    event = Skellam(variance, 2.0 * A, 2.0 * A, "replace-one")
    return float(rdp_to_dp(orders, event.rdp(orders), DELTA, warn=False)[0])


def _trusting_on_survivor_list(orig: Any) -> Any:
    """The pre-fix client: verify and sign the list with its committed count, then trust the stated count."""

    def patched(self: SecAggClient, msg: Any) -> bytes:
        committed = int(np.unpackbits(msg.chunks).sum())  # n <= 256: one chunk, the whole bitmap
        reply: bytes = orig(self, dataclasses.replace(msg, count=committed))
        self._signed_count = min(int(msg.count), self._n)  # the server's count bounds the groups revealed
        return reply

    return patched


@functools.lru_cache(maxsize=64)
def _drops(seed: int) -> frozenset[int]:
    """Three of every seven ring positions of this seed's roster graph (found by a probe round: the graph
    depends only on the roster, which dropouts at the masked input do not change)."""
    probe = run_round(Scenario(n=N, threshold=T, neighbours=K, noise=SPEC, seed=seed, dim=1))
    ring = [int(v) for v in probe.engine._graph.order]
    out = F(ring[p] for p in range(N) if p % 7 >= 4)
    if CANARY in out:  # rotate the pattern so the canary survives
        at = ring.index(CANARY)
        out = F(ring[p] for p in range(N) if (p - at) % 7 >= 4)
    return out


def _view(run: Run) -> tuple[np.ndarray, float] | None:
    """The server's unmasked sum of the canary's block (centred mod 2^bits) and the noise variance it knows is
    left in it; None when it can unmask nothing containing the canary (e.g. the round aborted)."""
    know = coalition_knowledge(run)
    block = next((c for c in learnable_sums(run, know) if CANARY in c), None)
    if block is None:
        return None
    assert len(block) == T, block  # the pattern leaves blocks of t survivors between dropped runs
    total = np.asarray(_unmask(run, know, block), dtype=np.int64)
    half = 1 << (run.scenario.bits - 1)
    y = np.where(total >= half, total - (1 << run.scenario.bits), total)
    var = sum(_kept(run, v, know.lowest_group(v))[1] for v in block)
    return y, var


def _audit(rounds: int, dim: int, *, attack: bool, patched: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run ``rounds`` harness rounds (``dim`` canary coordinates each) and score the server's views."""
    if patched:
        monkeypatch.setattr(
            SecAggClient, "_on_survivor_list", _trusting_on_survivor_list(SecAggClient._on_survivor_list)
        )
    rng = np.random.default_rng(2026)
    pos: list[np.ndarray] = []
    neg: list[np.ndarray] = []
    certs, aborted, violations = [], 0, 0
    for r in range(rounds):
        seed = 100 + r
        signs = rng.permutation(np.repeat([1, -1], dim // 2))
        x = np.where(signs > 0, A, (1 << 20) - A).astype(np.uint64)
        inputs = {c: np.zeros(dim, np.uint64) for c in range(1, N + 1)}
        inputs[CANARY] = x
        sc = Scenario(
            n=N, threshold=T, neighbours=K, noise=SPEC, seed=seed, dim=dim, inputs=inputs,
            dropouts={"masked_input": _drops(seed)},
        )  # fmt: skip
        run = run_round(sc, [CountInflation(value=N)] if attack else [])
        violations += bool(check_invariant(run, strict_noise=True))
        view = _view(run)
        honest_kept = float(SPEC.schedule(N).kept_variance_exact(9))
        if view is None:  # nothing unmasked: the observer's view carries no information (LR = 1)
            aborted += 1
            pos.append(np.zeros(dim // 2))
            neg.append(np.zeros(dim // 2))
            certs.append(_certificate(T * honest_kept))
            continue
        y, var = view
        score = exact_llr(skellam_log_pmf(y - A, var), skellam_log_pmf(y + A, var))
        pos.append(score[signs > 0])
        neg.append(score[signs < 0])
        certs.append(_certificate(T * honest_kept))  # the block of t honest clients, each keeping mu / 5
    est = audit_from_scores(np.concatenate(pos), np.concatenate(neg), delta=DELTA, confidence=0.95)
    return {
        "epsilon_lower": est.epsilon_lower,
        "epsilon_certified": max(certs),
        "aborted": aborted,
        "violations": violations,
    }


def test_schedule_arithmetic() -> None:
    """The numbers the module docstring states, from the schedule's own fields (boundaries, removable groups,
    kept variance at d = 9 and level 0), checked against hand arithmetic."""
    sched = SPEC.schedule(N)
    assert sched.boundaries == (0, 1, 2, 4, 8, 16, 20)
    assert sched.removable(9) == (6,) and sched.removable(0) == (1, 2, 3, 4, 5, 6)
    assert sched.kept_variance_exact(9) == pytest.approx(MU / 5)
    assert sched.base_variance == pytest.approx(MU / 21)


def test_quick_patched_clients_reveal_every_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick loop: one small round. Patched clients honour the inflated count (the server unmasks the canary's
    block with level 0 only, and the strict noise invariant reports it), unpatched ones refuse it (abort)."""
    sc = Scenario(n=N, threshold=T, neighbours=K, noise=SPEC, seed=100, dim=2, dropouts={"masked_input": _drops(100)})
    honest = run_round(sc, [CountInflation(value=N)])
    assert honest.aborted is not None and _view(honest) is None
    assert any("survivor list states 21" in why for why in honest.refused("consistency").values())
    monkeypatch.setattr(SecAggClient, "_on_survivor_list", _trusting_on_survivor_list(SecAggClient._on_survivor_list))
    broken = run_round(sc, [CountInflation(value=N)])
    view = _view(broken)
    assert view is not None
    assert view[1] == pytest.approx(T * MU / N)  # 4 clients, level 0 each: every group stripped
    assert any("noise group 1" in v for v in check_invariant(broken, strict_noise=True))


def test_quick_audit_separates_stripped_from_honest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick loop, one round of 4000 coordinates each (seeded, deterministic): the stripped deployment's lower
    bound is far above the honest one's, and the honest one stays below the certificate (measured: 1.6 and
    0.4 against 1.55; the slow test below makes the violation decisive)."""
    honest = _audit(1, 4000, attack=False, patched=False, monkeypatch=monkeypatch)  # before the patch
    broken = _audit(1, 4000, attack=True, patched=True, monkeypatch=monkeypatch)
    assert honest["aborted"] == 0 and honest["violations"] == 0
    assert honest["epsilon_lower"] <= honest["epsilon_certified"]
    assert broken["aborted"] == 0 and broken["violations"] == 1
    assert broken["epsilon_lower"] > honest["epsilon_lower"] + 0.3


@pytest.mark.slow
def test_audit_catches_count_inflation_against_trusting_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """12 rounds x 8000 coordinates (48 000 trials per side; about 40 s): patched clients under CountInflation
    give eps_lower > eps_certified (measured 2.28 against 1.55); unpatched clients (the attack refused: every
    round aborts, 3 rounds suffice) and patched clients under an honest server (measured 0.98) give
    eps_lower <= eps_certified."""
    broken = _audit(12, 8000, attack=True, patched=True, monkeypatch=monkeypatch)
    assert broken["epsilon_lower"] > broken["epsilon_certified"], broken
    monkeypatch.undo()  # back to today's clients
    refused = _audit(3, 8000, attack=True, patched=False, monkeypatch=monkeypatch)
    assert refused["aborted"] == 3 and refused["epsilon_lower"] <= refused["epsilon_certified"], refused
    honest = _audit(12, 8000, attack=False, patched=True, monkeypatch=monkeypatch)
    assert honest["aborted"] == 0 and honest["epsilon_lower"] <= honest["epsilon_certified"], honest
