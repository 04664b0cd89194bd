"""The import graph points one way and has no cycles.

Layers: ``simulations.cli`` (application) -> ``simulations`` -> ``protocols`` -> ``secagg_dp``; inside
``secagg_dp.accounting``: ``checkin`` -> ``core`` and ``shuffle`` -> ``core`` (+ ``checkin.tails``).
Imports are read statically (``ast``), including those inside functions, so a lazy import cannot hide an
upward edge. Run alone with ``python -m pytest tests/test_import_graph.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("secagg_dp", "protocols", "simulations")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(imported: str, known: set[str]) -> str | None:
    """The longest known module that ``imported`` names (``a.b.c`` may be a name inside module ``a.b``)."""
    while imported and imported not in known:
        imported = imported.rpartition(".")[0]
    return imported or None


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports anywhere in its body (absolute imports only, as the style asks)."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{mod}: relative import (use absolute imports)"
                names = [f"{node.module}.{a.name}" for a in node.names] or [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, known)
                if target and target != mod:
                    edges.add(target)
        graph[mod] = edges
    return graph


def _layer(mod: str) -> int:
    order = ("secagg_dp", "protocols", "simulations", "simulations.cli")
    return max(i for i, prefix in enumerate(order) if mod == prefix or mod.startswith(prefix + "."))


def _room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["secagg_dp", "accounting"] else None


GRAPH = import_graph()


def test_graph_was_read():
    assert "secagg_dp.accounting.checkin.mixture" in GRAPH
    assert "secagg_dp.accounting.core.conversion" in GRAPH["secagg_dp.accounting.checkin.mixture"]


def test_no_upward_import_between_layers():
    upward = [(a, b) for a, edges in GRAPH.items() for b in edges if _layer(b) > _layer(a)]
    assert not upward, f"upward imports: {upward}"


def test_nothing_imports_the_cli_package():
    users = [
        a
        for a, edges in GRAPH.items()
        for b in edges
        if (b == "simulations.cli" or b.startswith("simulations.cli.")) and not a.startswith("simulations.cli")
    ]
    assert not users, f"the CLI is the top layer, yet {users} import it"


def test_accounting_rooms_point_one_way():
    allowed = {"core": {"core"}, "checkin": {"core", "checkin"}, "shuffle": {"core", "shuffle", "checkin"}}
    bad = []
    for a, edges in GRAPH.items():
        room = _room(a)
        for b in edges:
            other = _room(b)
            if room and other and other not in allowed[room]:
                bad.append((a, b))
            if room == "shuffle" and other == "checkin" and b != "secagg_dp.accounting.checkin.tails":
                bad.append((a, b))  # shuffle may use the check-in binomial kernels only
            if room is None and a.startswith("secagg_dp.accounting.") and other and a != "secagg_dp.accounting":
                bad.append((a, b))
    assert not bad, f"imports against the room order: {bad}"


def test_no_cycles():
    """Tarjan-free check: depth-first search for a back edge, ignoring package ``__init__`` re-exports."""
    graph = {a: {b for b in edges if not _is_parent(b, a)} for a, edges in GRAPH.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend(path[path.index(nxt) :] + [node, nxt] if nxt in path else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, path + [node]):
                return True
        state[node] = 2
        return False

    for node in sorted(graph):
        if state.get(node) is None and visit(node, []):
            break
    assert not cycle, f"import cycle: {' -> '.join(cycle)}"


def _is_parent(pkg: str, mod: str) -> bool:
    """A module importing a name through its own parent package's ``__init__`` (a re-export) is not a cycle."""
    return mod.startswith(pkg + ".")


def test_flower_adapter_stands_on_the_library_not_the_simulator():
    """The deployment adapter (``simulations.flower``) takes its round plan, noise draw and ledger orders from the
    library (``secagg_dp.plan``, ``secagg_dp.accounting``), never from the simulator's clients or accountant."""
    banned = ("simulations.clients", "simulations.privacy")
    bad = [
        (a, b)
        for a, edges in GRAPH.items()
        if a == "simulations.flower" or a.startswith("simulations.flower.")
        for b in edges
        if any(b == x or b.startswith(x + ".") for x in banned)
    ]
    assert "simulations.flower.core" in GRAPH and "secagg_dp.plan" in GRAPH["simulations.flower.core"]
    assert not bad, f"the Flower path imports the simulator: {bad}"
