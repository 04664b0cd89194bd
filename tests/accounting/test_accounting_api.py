"""Public API is explicit, exported and documented (docs/accounting.md)."""

from __future__ import annotations

import importlib
from pathlib import Path

import secagg_dp.accounting as acc

MODULES = ["rdp", "mechanisms", "subsampling", "conversion", "calibration", "ledger", "cli"]
DOC = (Path(__file__).resolve().parents[2] / "docs" / "accounting.md").read_text()


def test_every_public_name_exists_has_docstring_and_is_documented():
    for m in MODULES:
        mod = importlib.import_module(f"secagg_dp.accounting.{m}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj):
                assert obj.__doc__, f"{m}.{name} lacks a docstring"
    for name in acc.__all__:
        assert hasattr(acc, name)
        assert name in DOC, f"{name} missing from docs/accounting.md"
