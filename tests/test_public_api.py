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
