"""Package attributes loaded on first use (PEP 562), for the accounting rooms whose ``__init__`` used to
star-import every module: importing one module of a room no longer imports all of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

__all__ = ["lazy_room"]


def lazy_room(
    package: str, modules: Sequence[str], all_order: Sequence[str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public names are those of ``modules`` (bound in that
    order, a later module's name winning, as star imports did) and whose ``__all__`` lists them in the order
    of ``all_order``. ``namespace`` is the package's ``globals()``; a submodule name imports that submodule."""

    def load() -> None:
        mods = {m: importlib.import_module(f"{package}.{m}") for m in modules}
        for m in modules:
            namespace.update({name: getattr(mods[m], name) for name in mods[m].__all__})
        namespace["__all__"] = list(dict.fromkeys(name for m in all_order for name in mods[m].__all__))

    def getattr_(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        if name.startswith("__") and name != "__all__":
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        load()
        try:
            return namespace[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    def dir_() -> list[str]:
        load()
        return sorted(namespace)

    return getattr_, dir_
