"""Griffe extension for the API reference: our docstrings' Sphinx roles become mkdocstrings cross-references.

``:func:`run_secagg_round```, ``:class:`~protocols.pool.ClientPool``` and the like (roles ``mod``, ``func``,
``class``, ``meth``, ``attr``, ``data``, ``exc``, ``obj``) are rewritten, once the package is loaded, into
``<autoref identifier="..." optional><code>...</code></autoref>``: a link where the target is rendered on an
API page, plain code where it is not (``optional``: never a broken link, never a raw role). A relative target
is resolved like Sphinx does, in the enclosing class, then module, then package (through re-exports to the
object's own path); ``~`` shows only the last component. Loaded by ``mkdocs.yml`` (mkdocstrings' python handler
``extensions``).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(mod|func|class|meth|attr|data|exc|obj):`(~?)\.?([\w.]+)(?:\(\))?`")
_ROOTS = ("secagg_dp", "protocols", "simulations")


def _resolve(obj: Any, target: str) -> str | None:
    """The full path of ``target`` as seen from ``obj``'s scope, or None."""
    head, _, rest = target.partition(".")
    if head in _ROOTS:
        return target
    scope = obj
    while scope is not None:
        members = getattr(scope, "members", {})
        if head in members:
            found = members[head]
            base = found.target_path if found.is_alias else found.path
            return f"{base}.{rest}" if rest else base
        scope = scope.parent
    return None


def rewrite(obj: Any, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference (or plain code)."""

    def repl(m: re.Match[str]) -> str:
        target = m.group(3)
        shown = target.rsplit(".", 1)[-1] if m.group(2) else target
        if m.group(1) in ("func", "meth"):
            shown += "()"
        code = f"<code>{html.escape(shown)}</code>"
        path = _resolve(obj, target)
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return _ROLE.sub(repl, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        stack: list[Any] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
