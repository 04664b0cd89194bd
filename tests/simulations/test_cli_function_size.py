"""No function in ``simulations/cli/`` is over 80 lines: a command handler builds the event, asks each
accountant and prints the certificates; the accounting itself lives in ``secagg_dp.accounting``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "simulations" / "cli"
LIMIT = 80


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((f"{path.name}:{node.name}", (node.end_lineno or node.lineno) - node.lineno + 1))
    return out


def test_the_check_sees_the_cli_and_measures_lines() -> None:
    sizes = dict(_functions(CLI / "account_checkin.py"))
    assert "account_checkin.py:_handle" in sizes and 1 <= sizes["account_checkin.py:_handle"] <= LIMIT


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_no_cli_function_over_80_lines(path: Path) -> None:
    long = [(name, n) for name, n in _functions(path) if n > LIMIT]
    assert not long, f"functions over {LIMIT} lines: {long}"
