"""Every public name is exported and has a docstring (callables); README.md keeps the two quick-start commands.

That every public name is documented (in the user guide or its API reference) is checked in
tests/docs/test_docs.py.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
PACKAGES = [
    "secagg_dp.noise",
    "secagg_dp.quantize",
    "secagg_dp.zq",
    "secagg_dp.crypto",
    "protocols",
    "secagg_dp.accounting",
    "secagg_dp.errors",
    "secagg_dp.rng",
    "secagg_dp.stages",
    "secagg_dp.plan",
]


@pytest.mark.parametrize("module_name", PACKAGES)
def test_public_names_exist_and_have_docstrings(module_name):
    mod = importlib.import_module(module_name)
    assert mod.__all__, f"{module_name} has an empty __all__"
    for name in mod.__all__:
        obj = getattr(mod, name)  # AttributeError if __all__ lists a missing name
        if callable(obj) or inspect.ismodule(obj):
            assert inspect.getdoc(obj), f"{module_name}.{name} lacks a docstring"


def test_readme_quick_start_is_the_two_documented_commands():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == ["pip install '.[sim]' && secagg-dp simulate", "pip install '.[test]' && python -m pytest"]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert 'pip install --quiet ".[test]" && python -m pytest' in ci


def test_accounting_loads_names_on_first_use_from_the_modules_it_lists():
    # secagg_dp.accounting and its core and checkin rooms bind their public names on first use (PEP 562). The
    # run-time table must name the same module for each name as the imports type checkers and the API reference
    # read (the `if TYPE_CHECKING:` block), and each name must be that module's object.
    import ast
    import subprocess
    import sys

    import secagg_dp.accounting as acc

    tree = ast.parse(Path(acc.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If))
    static = {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert static == acc._SOURCE
    assert set(static) == set(acc.__all__)
    for name, module in static.items():
        assert getattr(acc, name) is getattr(importlib.import_module(module), name), name
    for room in ("core", "checkin"):
        pkg = importlib.import_module(f"secagg_dp.accounting.{room}")
        for module in pkg._MODULES:
            mod = importlib.import_module(f"secagg_dp.accounting.{room}.{module}")
            for name in mod.__all__:
                assert name in pkg.__all__
    # importing one module of a room does not import the others (the check-in query skips the ledger and shuffle)
    code = (
        "import sys, secagg_dp.accounting.checkin.mixture; "
        "print(sorted(m for m in sys.modules if m.endswith(('.ledger', '.interop')) or '.shuffle' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
