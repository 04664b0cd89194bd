"""docs_ext/sphinx_roles.py: docstrings' Sphinx roles become optional cross-references, resolved like Sphinx."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
griffe = pytest.importorskip("griffe", reason="the docs extra (pulled in by the test extra) is not installed")
_spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs_ext" / "sphinx_roles.py")
roles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roles)


@pytest.fixture(scope="module")
def protocols_pkg():
    return griffe.load("protocols", search_paths=[str(ROOT)], resolve_aliases=False)


def test_relative_role_resolves_through_the_package_reexport(protocols_pkg):
    out = roles.rewrite(protocols_pkg, "see :func:`run_secagg_round`.")
    link = '<autoref identifier="protocols.round.run_secagg_round" optional><code>run_secagg_round()</code></autoref>'
    assert out == f"see {link}."


def test_tilde_shows_the_last_component_and_absolute_paths_stay(protocols_pkg):
    out = roles.rewrite(protocols_pkg, ":class:`~protocols.pool.ClientPool`")
    assert out == '<autoref identifier="protocols.pool.ClientPool" optional><code>ClientPool</code></autoref>'


def test_method_of_the_enclosing_class(protocols_pkg):
    client = protocols_pkg["client"]["SecAggClient"]
    out = roles.rewrite(client["receive"], ":meth:`decide_check_in`")
    assert 'identifier="protocols.client.SecAggClient.decide_check_in"' in out


def test_unknown_target_is_plain_code(protocols_pkg):
    assert roles.rewrite(protocols_pkg, ":mod:`nowhere`") == "<code>nowhere</code>"
