"""Trusted shuffler: uniform permutation (chi-square, stated error rate) and no identities at the analyzer."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from protocols.shuffler import (
    Analyzer,
    AnonymousBatch,
    Report,
    Shuffler,
    run_round,
    uniform_permutation,
)
from secagg_dp.errors import ParameterError, ProtocolError

ALPHA = 1e-6  # false-failure rate of each statistical test below


def _chi2_uniform(perms, k):
    index = {p: i for i, p in enumerate(itertools.permutations(range(k)))}
    counts = np.zeros(len(index))
    for p in perms:
        counts[index[tuple(p)]] += 1
    expected = len(perms) / len(index)
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(chi2.isf(ALPHA, len(index) - 1))  # critical value at α = 1e-6, df = k! − 1


@pytest.mark.slow
def test_secrets_permutation_is_uniform():
    # Default (rng=None, secrets-driven): 24 permutations of 4 items, 48000 draws; Pearson chi-square,
    # H0 uniform, reject above the α = 1e-6 critical value (df = 23, ≈ 63.2). Not seeded (OS CSPRNG) but
    # the false-failure rate is still α.
    stat, crit = _chi2_uniform([uniform_permutation(4) for _ in range(48000)], 4)
    assert stat < crit


def test_seeded_permutation_is_uniform_and_position_unbiased():
    rng = np.random.default_rng(20240601)
    stat, crit = _chi2_uniform([uniform_permutation(3, rng=rng) for _ in range(30000)], 3)
    assert stat < crit
    # each item lands in each position with probability 1/k: chi-square over the k×k table, df = (k−1)².
    k, draws = 6, 30000
    table = np.zeros((k, k))
    for _ in range(draws):
        for pos, item in enumerate(uniform_permutation(k, rng=rng)):
            table[item, pos] += 1
    e = draws / k
    assert float(((table - e) ** 2 / e).sum()) < chi2.isf(ALPHA, (k - 1) ** 2)


def test_identities_never_reach_the_analyzer():
    shuffler = Shuffler(rng=np.random.default_rng(1))
    for i, v in enumerate([3.0, 5.0, 7.0]):
        shuffler.receive(Report(100 + i, v))
    batch = shuffler.emit()
    assert isinstance(batch, AnonymousBatch)
    assert [f.name for f in batch.__dataclass_fields__.values()] == ["payloads"]
    assert all(type(x) is float for x in batch.payloads) and sorted(batch.payloads) == [3.0, 5.0, 7.0]
    assert "10" not in repr(batch).replace("payloads", "")  # no sender ids 100..102 in what the analyzer sees
    assert Analyzer.total(batch) == 15.0
    with pytest.raises(TypeError):
        Analyzer.total([Report(1, 2.0)])  # the analyzer refuses identified reports


def test_shuffler_state_machine():
    s = Shuffler()
    s.receive(Report(1, 0.5))
    with pytest.raises(ProtocolError):
        s.receive(Report(1, 0.7))
    s.emit()
    with pytest.raises(ProtocolError):
        s.emit()
    with pytest.raises(ProtocolError):
        s.receive(Report(2, 0.1))
    with pytest.raises(ParameterError):
        Report(-1, 0.0)
    assert "0.5" not in repr(Report(1, 0.5))  # payloads are not printed


def test_run_round_checkin_and_rr_debiasing():
    rng = np.random.default_rng(7)
    values = np.array([1.0] * 3000 + [0.0] * 7000)
    batch = run_round(values, gamma=0.5, mechanism="rr", eps0=1.0, rng=rng)
    k = len(batch.payloads)
    # k ~ Bin(10000, 0.5): |k − 5000| < 5.4·50 with probability > 1 − 1e-7
    assert abs(k - 5000) < 270
    est = Analyzer.rr_count(batch, 1.0)
    # E[est] = #ones checked in ≈ 1500; sd ≈ sqrt(k p q)/(2p−1) ≈ 75; 5.4 sd covers ≥ 1 − 1e-7 (+ check-in var)
    assert abs(est - 1500) < 5.4 * math.hypot(75, 25)
    g = run_round(np.zeros(100), gamma=1.0, mechanism="gaussian", sigma=1.0, rng=rng)
    assert len(g.payloads) == 100
    with pytest.raises(ParameterError):
        run_round(np.array([0.5]), gamma=1.0, mechanism="rr", eps0=1.0, rng=rng)
