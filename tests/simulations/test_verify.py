"""``secagg-dp verify``: exit codes, table and JSON output, and that broken arithmetic makes it fail."""

from __future__ import annotations

import json

import numpy as np
import pytest

import secagg_dp.zq
from secagg_dp.quantize import ZqCodec
from simulations import verify
from simulations.cli import main


def test_verify_passes_and_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--seed", "1", "--trials", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "FAIL" not in out
    for name in (
        "end-to-end encode/noise/sum/decode",
        "modular sum bit-exact",
        "encode + noise bit-exact",
        "wrap-around edges",
        "rotation inverse/orthogonal",
        "Δ₂ after conditional rounding",
        "protocol q=2^62",
        "dropout model",
        "crypto == ideal",
    ):
        assert name in out
    assert "bits=62" in out  # q up to 2^62 is exercised
    last = out.strip().splitlines()[-1]
    n_pass, n_all = last.split()[0].split("/")
    assert n_pass == n_all and int(n_all) >= 20


def test_verify_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--json", "--trials", "1", "--seed", "7"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["ok"] is True and data["failed"] == 0 and data["passed"] == len(data["rows"])
    assert all(set(r) == {"name", "params", "passed", "detail"} and r["passed"] for r in data["rows"])
    # the protocol rows: q = 2^62 summed bit-exactly through rounds with a dropout at every stage
    exact62 = [r for r in data["rows"] if r["name"] == "protocol q=2^62" and r["detail"] == "bit-exact"]
    stages = {s for r in exact62 for s in r["params"]["dropouts"]}
    assert stages == {"advertise_keys", "share_keys", "masked_input", "unmasking"}
    assert any(not r["params"]["dropouts"] for r in exact62)
    assert any(r["name"] == "protocol q=2^16" and r["detail"].startswith("aborted") for r in data["rows"])


def test_rows_have_the_documented_shape() -> None:
    for check in verify.CHECKS:
        rows = list(check(seed=0, trials=1))
        assert rows
        for name, params, passed, detail in rows:
            assert isinstance(name, str) and isinstance(params, dict)
            assert isinstance(passed, bool) and isinstance(detail, str)


def test_a_failing_check_gives_nonzero_exit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def always_fails(*, seed: int, trials: int) -> list[verify.Row]:
        return [("deliberately failing", {"seed": seed}, False, "injected by the test")]

    monkeypatch.setattr(verify, "CHECKS", [verify.check_rotation, always_fails])
    rc = main(["verify", "--trials", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "deliberately failing" in out and "FAIL" in out and "1 FAILED" in out


def test_broken_modular_sum_is_detected(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = secagg_dp.zq.sum_mod

    def off_by_one(arrays, bits):  # type: ignore[no-untyped-def]
        return secagg_dp.zq.add_mod(real(arrays, bits), np.uint64(1), bits)

    monkeypatch.setattr(secagg_dp.zq, "sum_mod", off_by_one)
    monkeypatch.setattr(verify, "CHECKS", [verify.check_modular_sum_exact, verify.check_end_to_end])
    rc = main(["verify", "--trials", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "PASS" not in out.split("modular sum bit-exact", 1)[1].splitlines()[0]


def test_broken_decode_is_detected(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = ZqCodec.decode

    def biased(self, aggregate):  # type: ignore[no-untyped-def]
        return real(self, aggregate) + 1.0  # a bias of 1 per coordinate in original units

    monkeypatch.setattr(ZqCodec, "decode", biased)
    monkeypatch.setattr(verify, "CHECKS", [verify.check_end_to_end])
    assert main(["verify", "--trials", "1"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_broken_protocol_sum_is_detected(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import protocols

    real = protocols.run_secagg_round

    def off_by_one(inputs, **kwargs):  # type: ignore[no-untyped-def]
        res = real(inputs, **kwargs)
        bits = kwargs["bits"]
        object.__setattr__(res, "aggregate", secagg_dp.zq.add_mod(res.aggregate, np.uint64(1), bits))
        return res

    monkeypatch.setattr(protocols, "run_secagg_round", off_by_one)
    monkeypatch.setattr(verify, "CHECKS", [verify.check_protocol])
    rc = main(["verify", "--trials", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "first mismatch" in out and "FAILED" in out.strip().splitlines()[-1]


@pytest.mark.parametrize("argv", [["verify", "--trials", "0"], ["verify", "--seed", "-1"], ["verify", "--bogus"]])
def test_bad_arguments_exit_2(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[1] in err
