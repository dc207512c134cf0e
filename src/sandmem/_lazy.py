"""Names a package exports, imported on first use (PEP 562).

A package lists where each of its names is defined; the defining module is imported the first
time the name is asked for, and the value is then kept in the package's namespace. So
``import sandmem`` (and ``sandmem.cli``, ``sandmem.memory``) costs only what the caller goes on
to use: ``sandmem memory status`` never imports the agent runtime or ``openai``. The same
names are imported under ``TYPE_CHECKING`` beside the table, for type checkers and for the
layering test, which reads those imports.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name of ``where`` comes from
    the module it maps to (``"module"``, or ``"module:attribute"`` for a name exported under
    another one)."""

    def __getattr__(name: str) -> Any:
        target = where.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = target.partition(":")
        value = getattr(load(module), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__


def load(module: str) -> ModuleType:
    """Import ``module`` through the ``import`` statement's own path (``__import__``), so
    ``python -X importtime`` reports what a lazy name costs (``importlib.import_module``
    bypasses it)."""
    __import__(module)
    return sys.modules[module]
