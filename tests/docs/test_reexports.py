"""docs_ext/reexports.py: ``from m import x as x`` is a public re-export in the API reference, as for mypy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
griffe = pytest.importorskip("griffe", reason="the docs extra (pulled in by the test extra) is not installed")
_spec = importlib.util.spec_from_file_location("reexports", ROOT / "docs_ext" / "reexports.py")
reexports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reexports)


def _public(mod):
    # the names the API page renders with the `!^_` filter, less the subpackages
    return {n for n, o in mod.members.items() if (o.is_alias or not o.is_module) and o.is_public and n[0] != "_"}


def test_only_self_aliased_imports_become_public():
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.b import x as x, y, z as w\n"
    ext = griffe.load_extensions(reexports.ExplicitReexports)
    assert _public(griffe.visit("m", Path("m.py"), code, extensions=ext)) == {"x"}
    assert _public(griffe.visit("m", Path("m.py"), code)) == set()


def test_the_accounting_page_renders_exactly_the_runtime_all():
    # the oracle is the package's run-time __all__ (computed from its loader table), not what griffe reads
    import secagg_dp.accounting as acc

    ext = griffe.load_extensions(reexports.ExplicitReexports)
    pkg = griffe.load("secagg_dp.accounting", search_paths=[str(ROOT)], resolve_aliases=False, extensions=ext)
    assert _public(pkg) == set(acc.__all__)
    assert "docs_ext/reexports.py:ExplicitReexports" in (ROOT / "mkdocs.yml").read_text()
