"""``secagg-dp audit`` / simulations.audit: the audit runs the simulator's mechanism, is valid on the honest
mechanism, and catches deliberately broken ones (halved noise; noise stripped by the server)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from secagg_dp.errors import ConfigError, ParameterError
from simulations.audit import audit_scores, run_audit, run_one_run_audit
from simulations.cli import main
from simulations.config import load_config

# n = 10, d = 16, p = 1, no dropouts, one round: a Gaussian-like shift of 2Cs / (sqrt(10) sigma_int) = 2/z = 0.5
SMALL = [
    "mode=ideal",
    "population.clients=10",
    "task.dim=16",
    "population.checkin=1.0",
    "population.dropout=0",
    "rounds=1",
]
# add-then-remove Skellam noise, half of the clients drop at each stage, tolerance 0.98: the server strips
# every group (count inflation) and the sum keeps K mu / N instead of mu
STRIP = [
    "mode=ideal",
    "population.clients=30",
    "task.dim=16",
    "population.checkin=1.0",
    "population.dropout=0.5",
    "rounds=1",
    'privacy.mechanism="skellam"',
    'privacy.noise_enforcement="add-then-remove"',
    "privacy.dropout_tolerance=0.98",
    "secagg.threshold=2",
    'secagg.security="semi-honest"',
]
SURE = 1 - 1e-6  # confidence of the validity checks: a false failure has probability <= 1e-6


def _cfg(overrides: list[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return load_config("default", overrides)


def test_server_scores_have_the_mechanisms_law() -> None:
    # oracle: the mechanism's math. With p = 1 and no dropouts the canary is always in the sum; its decoded
    # coordinate is +-Cs plus the n clients' noise projected on a unit vector, variance n sigma_int^2 (the
    # rounding of the canary adds at most 1/4), so the server's score 2 Cs y / v has mean +-2 (Cs)^2 / v and
    # variance 4 (Cs)^2 / v. 4000 trials: the mean is within 6 standard errors except with prob. 2e-9.
    from simulations.runner import plan

    cfg = _cfg(SMALL)
    p = plan(cfg, 0)
    mu, v = cfg.privacy.clip * p.scale, 10 * p.sigma_int**2
    pos, neg = audit_scores(cfg, 4000, rng=np.random.default_rng(5))
    m, sd = 2 * mu**2 / v, math.sqrt(4 * mu**2 / v)
    assert abs(pos["server"].mean() - m) < 6 * sd / math.sqrt(4000)
    assert abs(neg["server"].mean() + m) < 6 * sd / math.sqrt(4000)
    assert pos["server"].std() == pytest.approx(sd, rel=0.1)
    np.testing.assert_allclose(pos["analyst"], pos["server"], rtol=1e-9)  # w = 1: the two views coincide


@pytest.mark.parametrize("enforced", [False, True], ids=["ddg", "skellam-add-then-remove"])
def test_batched_engine_has_the_law_of_the_simulators_round(enforced: bool) -> None:
    # the batched trials against aggregate_round itself (round engine), with dropouts, p < 1 and aborts (and
    # add-then-remove noise, whose kept groups the round draws from each client's seeds): two-sample
    # Kolmogorov-Smirnov on each observer's scores, p-value > 1e-6 (false-failure rate 1e-6)
    overrides = [
        "mode=ideal",
        "population.clients=8",
        "task.dim=4",
        "population.checkin=0.7",
        "population.dropout=0.1",
        "rounds=1",
        "secagg.threshold=3",
        'secagg.security="semi-honest"',
    ]
    if enforced:
        overrides += ['privacy.mechanism="skellam"', 'privacy.noise_enforcement="add-then-remove"']
    cfg = _cfg(overrides)
    b_pos, b_neg = audit_scores(cfg, 3000, rng=np.random.default_rng(1))
    r_pos, r_neg = audit_scores(cfg, 300, rng=np.random.default_rng(2), engine="round")
    for o in ("analyst", "server"):
        assert stats.ks_2samp(b_pos[o], r_pos[o]).pvalue > 1e-6
        assert stats.ks_2samp(b_neg[o], r_neg[o]).pvalue > 1e-6
    assert stats.ks_2samp(b_pos["server"], b_neg["server"]).pvalue < 1e-6  # and the test has power


def test_coalition_scores_have_the_law_of_one_noise_share() -> None:
    # oracle: the coalition's math. Semi-honest clients let the coalition unmask one masked input (min_sum
    # m = 1), so the canary's input is seen with its own noise share only (h = 1) after the 3 colluders'
    # inputs and noise are subtracted: score 2 Cs y / sigma^2 with mean 2 (Cs)^2 / sigma^2 and variance
    # 4 (Cs)^2 / sigma^2. 4000 trials: within 6 standard errors except with probability 2e-9.
    from simulations.runner import plan

    cfg = _cfg([*SMALL, 'secagg.security="semi-honest"', "secagg.corrupt_clients=3"])
    p = plan(cfg, 0)
    mu, v = cfg.privacy.clip * p.scale, p.sigma_int**2
    pos, neg = audit_scores(cfg, 4000, rng=np.random.default_rng(6))
    m, sd = 2 * mu**2 / v, math.sqrt(4 * mu**2 / v)
    assert abs(pos["coalition"].mean() - m) < 6 * sd / math.sqrt(4000)
    assert abs(neg["coalition"].mean() + m) < 6 * sd / math.sqrt(4000)
    assert pos["coalition"].std() == pytest.approx(sd, rel=0.1)
    out = run_audit(cfg, trials=20_000, rng=np.random.default_rng(7), confidence=SURE, observer="coalition")
    r = out["coalition"]
    assert (r["colluders"], r["min_sum"]) == (3, 1) and out["observers"] == ["coalition"]
    # shift 2 sqrt(10)/z = 1.58 standard deviations: far more visible than the server's 0.5, yet below its certificate
    assert 2.5 < r["epsilon_lower"] <= r["epsilon_certified"]


def test_crypto_mode_runs_the_same_round() -> None:
    # the round engine in crypto mode (the full protocol) gives the ideal mode's scores exactly: the same code
    # path, the same seeds, the same sum bit for bit
    base = [
        "population.clients=5",
        "task.dim=4",
        "population.checkin=1.0",
        "population.dropout=0.1",
        "rounds=1",
        "secagg.threshold=2",
        'secagg.security="semi-honest"',
    ]
    ideal = audit_scores(_cfg(["mode=ideal", *base]), 6, rng=np.random.default_rng(3), engine="round")
    crypto = audit_scores(_cfg(["mode=crypto", *base]), 6, rng=np.random.default_rng(3), engine="round")
    for side in (0, 1):
        for o in ("analyst", "server"):
            np.testing.assert_array_equal(ideal[side][o], crypto[side][o])
    assert np.any(ideal[0]["server"] != 0)


def test_honest_mechanism_stays_below_its_certificate() -> None:
    for overrides, observer in ((SMALL, "all"), (STRIP, "server"), ([*STRIP, "secagg.corrupt_clients=4"], "coalition")):
        cfg = _cfg(overrides)
        out = run_audit(cfg, trials=60_000, rng=np.random.default_rng(11), confidence=SURE, observer=observer)
        for o in out["observers"]:
            r = out[o]
            assert 0.0 <= r["epsilon_lower"] <= r["epsilon_certified"] and not r["violation"]
            assert (r["delta"], r["trials"], r["confidence"]) == (1e-5, 60_000, SURE)
    assert out["certificate"] is False and out["neighbouring"] == "replace-one"


@pytest.mark.slow
def test_halved_noise_is_caught() -> None:
    # noise std halved after certification: shift 1 instead of 0.5. Over 5 seeds the 95% lower bound at 4e5
    # trials measured 2.94 +- 0.10 against the certificate 2.168, 8 sd apart: a miss (false failure) has
    # probability ~1e-15 under a normal approximation. Seed fixed.
    out = run_audit(_cfg(SMALL), trials=400_000, rng=np.random.default_rng(21), fault="halve-noise")
    for o in ("analyst", "server"):
        assert out[o]["epsilon_lower"] > out[o]["epsilon_certified"] and out[o]["violation"]


@pytest.mark.slow
def test_stripped_noise_is_caught() -> None:
    # every add-then-remove group removed by the server (SecAgg+ count inflation): over 4 seeds the 95% lower
    # bound at 1e6 trials measured 2.59 +- 0.10 against the server's certificate 1.912, 7 sd apart (a miss
    # has probability ~1e-12 under a normal approximation). Seed fixed.
    out = run_audit(
        _cfg(STRIP), trials=1_000_000, rng=np.random.default_rng(301), fault="strip-noise", observer="server"
    )
    assert out["server"]["epsilon_lower"] > out["server"]["epsilon_certified"]


def test_one_run_audit_of_a_real_task() -> None:
    # 100 canaries among 200 mean-task clients; z = 0.5 makes each canary's sign visible (per-canary shift
    # 2C against noise std z C), so most guesses are right. At m = 100 the delta term 2 m delta alpha of
    # Theorem 3 (Steinke, Nasr & Jagielski 2023) keeps every p-value above 2e-5, so the 95% bound is used; even
    # 100/100 correct gives at most 3.5 (the closed form q = 0.05^(1/100)), far below the certificate 26.1
    cfg = _cfg(
        [
            "mode=ideal",
            "population.clients=200",
            "task.dim=128",
            "population.checkin=1.0",
            "population.dropout=0",
            "rounds=1",
            "privacy.noise_multiplier=0.5",
            "secagg.bits=24",
        ]
    )
    out95 = run_one_run_audit(cfg, canaries=100, rng=np.random.default_rng(8))
    assert out95["analyst"]["correct"] >= 90 and 2.0 < out95["analyst"]["epsilon_lower"] < 3.5
    out = run_one_run_audit(cfg, canaries=100, rng=np.random.default_rng(8), confidence=SURE)
    r = out["analyst"]
    assert r["canaries"] == 100 and r["guesses"] == 100 and r["correct"] >= 90
    assert r["epsilon_lower"] == 0.0  # at confidence 1 - 1e-6 the delta term alone exceeds 1e-6: no claim
    assert out95["analyst"]["epsilon_certified"] == pytest.approx(26.13, abs=0.01)


def test_bad_inputs() -> None:
    cfg = _cfg(SMALL)
    with pytest.raises(ParameterError, match="coalition"):
        run_audit(cfg, trials=100, observer="coalition", engine="round")
    with pytest.raises(ParameterError, match="observer"):
        run_audit(cfg, trials=100, observer="everyone")
    with pytest.raises(ParameterError, match="strip-noise"):
        run_audit(cfg, trials=100, fault="strip-noise")
    with pytest.raises(ParameterError, match="trials"):
        run_audit(cfg, trials=3)
    with pytest.raises(ParameterError, match="engine"):
        run_audit(cfg, trials=100, engine="fast")
    with pytest.raises(ConfigError, match="privacy.unit"):
        run_audit(_cfg(["mode=ideal", "task.name=logreg", 'privacy.unit="sample"']), trials=100)
    with pytest.raises(ConfigError, match="population.participation"):  # the trials model the per-round coin
        run_audit(
            _cfg(["mode=ideal", 'population.participation="random-checkin"', "population.epoch_rounds=5"]), trials=100
        )
    with pytest.raises(ParameterError, match="canaries"):
        run_one_run_audit(cfg, canaries=11)
    with pytest.raises(ParameterError, match="strip-noise"):
        run_one_run_audit(_cfg(STRIP), canaries=4, fault="strip-noise")


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # simulate's accountant at p = 1 (tails.py)
def test_cli_writes_results_and_prints_both_figures(tmp_path, capsys) -> None:
    rc = main(["audit", "--out", str(tmp_path), "--trials", "3000", "--seed", "1", "--no-progress", *SMALL])
    assert rc == 0
    text = capsys.readouterr().out
    assert "analyst" in text and "server" in text and "empirical ε ≥" in text and "certified ε ≤" in text
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["schema"] == "secagg-dp/audit-results/1"
    for o in ("analyst", "server"):
        rec = doc["audit"][o]
        assert set(rec) >= {"epsilon_lower", "epsilon_certified", "delta", "trials", "confidence"}
    # the certificate printed is simulate's for the same configuration
    assert main(["simulate", "--out", str(tmp_path / "sim"), "--json", "--no-plots", "--no-progress", *SMALL]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert doc["audit"]["analyst"]["epsilon_certified"] == pytest.approx(sim["privacy"]["epsilon"], rel=1e-12)
    assert doc["audit"]["server"]["epsilon_certified"] == pytest.approx(sim["privacy"]["server"]["epsilon"], rel=1e-12)
    coalition = sim["privacy"]["coalition"]["epsilon"]
    assert doc["audit"]["coalition"]["epsilon_certified"] == pytest.approx(coalition, rel=1e-12)
    assert (tmp_path / "audit.png").stat().st_size > 1000


def test_cli_json_and_one_line_errors(tmp_path, capsys) -> None:
    rc = main(
        [
            "audit",
            "--out",
            str(tmp_path),
            "--json",
            "--no-plots",
            "--trials",
            "600",
            "--seed",
            "2",
            "--observer",
            "server",
            *SMALL,
        ]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["audit"]["observers"] == ["server"] and "analyst" not in doc["audit"]
    assert (
        main(
            [
                "audit",
                "--out",
                str(tmp_path),
                "--no-plots",
                "--trials",
                "600",
                "--observer",
                "coalition",
                "--engine",
                "round",
                *SMALL,
            ]
        )
        == 2
    )
    assert "coalition" in capsys.readouterr().err


ONE_COORD = [*SMALL[:2], "task.dim=1", *SMALL[3:], 'privacy.mechanism="skellam"']


def test_exact_statistic_is_the_exact_llr_and_labelled() -> None:
    """statistic = exact-llr on a one-coordinate Skellam view: the server's score equals the exact log LR of the
    integer view y under the canary's randomized rounding (oracle: mpmath's Bessel function, Skellam pmf
    e^-v I_|z|(v)); it is increasing in y like the Gaussian score (a symmetric log-concave shift family has a
    monotone LR), so both give the same bound; results.json labels the test used."""
    import mpmath

    from simulations.runner import plan

    cfg = _cfg(ONE_COORD)
    p = plan(cfg, 0)
    mu, v = cfg.privacy.clip * p.scale, 10 * p.sigma_int**2
    pos_e, _ = audit_scores(cfg, 40, rng=np.random.default_rng(3), statistic="exact-llr", coalition=False)
    pos_g, _ = audit_scores(cfg, 40, rng=np.random.default_rng(3), statistic="gaussian-llr", coalition=False)
    y = np.rint(pos_g["server"] * v / (2 * mu)).astype(int)  # the Gaussian score is 2 mu y / v
    lo, f = math.floor(mu), mu - math.floor(mu)
    mpmath.mp.dps = 30

    def pmf(z: int) -> mpmath.mpf:
        return mpmath.exp(-v) * mpmath.besseli(abs(z), v)

    for yy, got in zip(y[:6], pos_e["server"][:6], strict=True):
        want = mpmath.log(
            ((1 - f) * pmf(yy - lo) + f * pmf(yy - lo - 1)) / ((1 - f) * pmf(yy + lo) + f * pmf(yy + lo + 1))
        )
        assert got == pytest.approx(float(want), rel=1e-6, abs=1e-9)
    order = np.argsort(y, kind="stable")
    assert np.all(np.diff(pos_e["server"][order]) >= -1e-12)  # monotone in y
    a = run_audit(cfg, trials=600, rng=np.random.default_rng(1))
    assert {a[o]["test"]["statistic"] for o in a["observers"]} == {"exact-llr"}
    b = run_audit(cfg, trials=600, rng=np.random.default_rng(1), statistic="gaussian-llr")
    assert b["server"]["test"]["statistic"] == "gaussian-llr"
    assert a["server"]["epsilon_lower"] == pytest.approx(b["server"]["epsilon_lower"], abs=1e-9)
    wide = run_audit(_cfg(SMALL), trials=60, rng=np.random.default_rng(1), observer="server")
    assert wide["server"]["test"]["statistic"] == "gaussian-llr"  # d = 16: the decoded coordinate is rotated
    with pytest.raises(ParameterError, match="statistic"):
        run_audit(_cfg(SMALL), trials=60, statistic="exact-llr")
    with pytest.raises(ParameterError, match="statistic"):
        run_audit(cfg, trials=60, statistic="likelihood")
