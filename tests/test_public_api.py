"""Every public name is exported, has a docstring (callables) and is documented in README.md."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
README = (_ROOT / "README.md").read_text()
# names may be documented in README.md or in the documentation pages under docs/
DOCUMENTED = "\n".join([README, *(p.read_text() for p in sorted((_ROOT / "docs").glob("**/*.md")))])
PACKAGES = ["secagg_dp.noise", "secagg_dp.quantize", "secagg_dp.zq", "secagg_dp.crypto", "protocols",
            "secagg_dp.accounting", "secagg_dp.errors", "secagg_dp.rng"]


@pytest.mark.parametrize("module_name", PACKAGES)
def test_public_names_exist_are_documented_and_in_readme(module_name):
    mod = importlib.import_module(module_name)
    assert mod.__all__, f"{module_name} has an empty __all__"
    for name in mod.__all__:
        obj = getattr(mod, name)  # AttributeError if __all__ lists a missing name
        if callable(obj) or inspect.ismodule(obj):
            assert inspect.getdoc(obj), f"{module_name}.{name} lacks a docstring"
        assert re.search(rf"(?<![\w.]){re.escape(name)}\b", DOCUMENTED.replace("secagg_dp.errors.", "")), (
            f"{module_name}.{name} is not documented in README.md or docs/")


def test_readme_quick_start_is_the_two_documented_commands():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == ["pip install '.[sim]' && secagg-dp simulate", "pip install '.[test]' && python -m pytest"]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "pip install --quiet \".[test]\" && python -m pytest" in ci
