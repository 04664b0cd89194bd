"""Public API is explicit, exported and documented (README.md)."""

from __future__ import annotations

import importlib
from pathlib import Path

import secagg_dp.accounting as acc

MODULES = ["rdp", "mechanisms", "subsampling", "conversion", "calibration", "ledger", "cli", "logspace",
           "checkin", "checkin_math", "checkin_mechanisms", "dropout", "local_steps", "baselines", "cli_checkin",
           "shuffle_gaussian", "shuffled_checkin", "ldp_shuffle", "cli_shuffle"]
DOC = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_public_name_exists_has_docstring_and_is_documented():
    for m in MODULES:
        mod = importlib.import_module(f"secagg_dp.accounting.{m}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj):
                assert obj.__doc__, f"{m}.{name} lacks a docstring"
    for name in acc.__all__:
        assert hasattr(acc, name)
        assert name in DOC, f"{name} missing from README.md"
    assert len(set(acc.__all__)) == len(acc.__all__)


def test_every_public_function_of_every_module_is_exported():
    # the package namespace covers all three parts (core, check-in, shuffle); module-local names are listed
    local = {"DEFAULT_ORDERS", "NEIGHBOURING", "rdp_to_epsilon", "check_orders", "register_account",
             "register_calibrate"}
    for m in MODULES:
        mod = importlib.import_module(f"secagg_dp.accounting.{m}")
        for name in mod.__all__:
            if name not in local:
                assert name in acc.__all__, f"{m}.{name} not exported by secagg_dp.accounting"
