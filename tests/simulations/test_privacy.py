"""The epsilon in results.json is the check-in accountant's certificate, and the ledger matches the rounds."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from simulations.privacy import effective_gamma
from simulations.runner import plan, run_scenario
from tests.simulations.conftest import small_config


def test_certified_epsilon_is_the_checkin_accountants(tmp_path):
    from secagg_dp.accounting import checkin as ck
    from secagg_dp.accounting import checkin_mechanisms as cm

    cfg = small_config(rounds=3, population={"clients": 40, "checkin": 0.5, "dropout": 0.1},
                       privacy={"noise_multiplier": 4.0}, secagg={"threshold_fraction": 0.2})
    doc = run_scenario(cfg, tmp_path)
    p = plan(cfg, 11)
    # independent recomputation straight from the accounting API (replace-one: twice the codec's bounds)
    mech = cm.DDGSum(sigma=p.sigma_int, dim=p.padded_dim, l2_sensitivity=2 * p.l2_sensitivity,
                     l1_sensitivity=2 * p.l1_sensitivity)
    prov = ck.SubsampledCheckin(mechanism=mech, n=40)
    gamma = 0.5 * 0.9**3
    assert effective_gamma(0.5, 0.1) == pytest.approx(gamma)
    for t, rnd in enumerate(doc["rounds"], start=1):
        with _nowarn():  # the best-order-at-the-edge warning is not under test here
            want = ck.checkin_epsilon(prov, 40, gamma, t, cfg.privacy.delta)
        assert rnd["epsilon"] == pytest.approx(want.epsilon, rel=1e-12)
    eps = [r["epsilon"] for r in doc["rounds"]]
    assert eps == sorted(eps) and doc["privacy"]["neighbouring"] == "replace-one"
    assert doc["privacy"]["method"] == "rdp" and doc["privacy"]["gamma"] == pytest.approx(gamma)
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        rows = db.execute("SELECT round, epsilon FROM rounds ORDER BY round").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3] and np.allclose([r[1] for r in rows], eps)


def test_interrupted_run_keeps_ledger_and_results_in_step(tmp_path):
    cfg = small_config(rounds=4, privacy={"noise_multiplier": 4.0})

    def stop(doc):
        if len(doc["rounds"]) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(cfg, tmp_path, on_round=stop)
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        n = db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0]
    from simulations.results import read_results

    assert n == len(read_results(tmp_path / "results.json")["rounds"]) == 2


class _nowarn:
    def __enter__(self):
        import warnings

        self._c = warnings.catch_warnings()
        self._c.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._c.__exit__(*exc)
