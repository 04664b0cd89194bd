"""Griffe extension for the API reference: ``from m import x as x`` re-exports ``x``, as type checkers read it.

PEP 484 makes an import aliased to its own name an explicit re-export; mypy ``--strict`` reads it so, griffe
(without this extension) does not. ``secagg_dp.accounting`` computes ``__all__`` from the table its lazy loader
uses, which griffe cannot evaluate, and names each export ``as`` itself under ``TYPE_CHECKING``: this extension
marks those names public, so its API page renders them (and only them, with the ``!^_`` filter). Loaded by
``mkdocs.yml`` (mkdocstrings' python handler ``extensions``).
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class ExplicitReexports(griffe.Extension):
    """Mark every alias made by ``from m import x as x`` public."""

    def on_alias_instance(self, *, node: ast.AST | griffe.ObjectNode, alias: griffe.Alias, **kwargs: Any) -> None:
        if isinstance(node, ast.ImportFrom) and any(a.asname == a.name == alias.name for a in node.names):
            alias.public = True
