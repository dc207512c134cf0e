"""The package's layering, read from the code's own imports (top level, inside functions and
under ``TYPE_CHECKING``), as ``docs/architecture.md`` draws it.

- Every module belongs to a *floor* (``FLOORS``); a module imports only from its own floor or
  floors below it. Importing a package's ``__init__`` counts as importing that package's floor.
- No import cycle crosses a floor; inside one floor, a cycle is allowed only through imports
  made for typing (under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# (floor, module prefixes), lowest first. The longest matching prefix decides a module's floor.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "sandmem._errors",
            "sandmem._items",
            "sandmem._settings",
            "sandmem._usage",
            "sandmem._truncate",
            "sandmem._prompts",
            "sandmem._docstrings",
            "sandmem._version",
            "sandmem._extras",
            "sandmem._log_lines",
            "sandmem.redaction",
        ),
    ),
    ("models", ("sandmem.models",)),
    ("tracing", ("sandmem.tracing",)),
    ("sandboxes", ("sandmem.sandboxes",)),
    ("agent", ("sandmem.agent",)),
    ("run", ("sandmem.run",)),
    (
        "memory",
        (
            "sandmem.memory.config",
            "sandmem.memory.layout",
            "sandmem.memory.rollouts",
            "sandmem.memory.state",
            "sandmem.memory.selection",
            "sandmem.memory.journal",
            "sandmem.memory.history",
            "sandmem.memory.proposals",
            "sandmem.memory._history_prune",
            "sandmem.memory.verify",
            "sandmem.memory.read_prompt",
            "sandmem.memory.live_edit",
            "sandmem.memory._types",
            "sandmem.memory._json",
            "sandmem.memory._text",
            "sandmem.memory._results",
            "sandmem.memory._render",
            "sandmem.memory._render_text",
            # the store seam: MemoryLayoutConfig names it; its sync is the floor above
            "sandmem.memory.store._base",
        ),
    ),
    ("memory.store", ("sandmem.memory.store",)),
    ("memory.extractive", ("sandmem.memory.extractive",)),
    ("memory.generation", ("sandmem.memory.generation",)),
    ("memory.views", ("sandmem.memory.views",)),
    ("memory.ingestion", ("sandmem.memory.ingestion",)),
    ("memory.api", ("sandmem.memory", "sandmem.memory._api", "sandmem.memory.mcp")),
    ("capabilities", ("sandmem.capabilities",)),
    ("distributed", ("sandmem.distributed",)),
    ("public", ("sandmem", "sandmem.testing")),
    ("apps", ("sandmem.eval", "sandmem.demo")),
    ("cli", ("sandmem.cli",)),
]
RANK = {name: rank for rank, (name, _) in enumerate(FLOORS)}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in (SRC / "sandmem").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def floor_of(module: str) -> str:
    best, best_len = None, -1
    for name, prefixes in FLOORS:
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    assert best is not None, f"{module} belongs to no floor: add it to FLOORS"
    return best


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_only_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def import_edges() -> dict[str, dict[str, bool]]:
    """module -> {imported module: True when every import of it is for typing only}."""
    edges: dict[str, dict[str, bool]] = defaultdict(dict)
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_lines = _type_only_lines(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if not target.startswith("sandmem"):
                    continue
                resolved = _resolve(target)
                if resolved is None or resolved == module:
                    continue
                typing_only = node.lineno in typing_lines
                edges[module][resolved] = edges[module].get(resolved, True) and typing_only
    return edges


EDGES = import_edges()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_floor() -> None:
    for module in MODULES:
        floor_of(module)


def test_no_import_runs_up_a_floor() -> None:
    wrong = [
        f"{module} ({floor_of(module)}) imports {target} ({floor_of(target)})"
        for module, targets in EDGES.items()
        for target in targets
        if RANK[floor_of(target)] > RANK[floor_of(module)]
    ]
    assert wrong == []


def test_no_cycle_crosses_a_floor() -> None:
    graph = {module: set(targets) for module, targets in EDGES.items()}
    crossing = [c for c in _cycles(graph) if len({floor_of(m) for m in c}) > 1]
    assert crossing == []


def test_no_runtime_cycle_inside_a_floor() -> None:
    graph = {
        module: {target for target, typing_only in targets.items() if not typing_only}
        for module, targets in EDGES.items()
    }
    assert _cycles(graph) == []


@pytest.mark.parametrize(
    "folder", sorted({m for m, p in MODULES.items() if p.name == "__init__.py"})
)
def test_each_folder_states_its_boundary(folder: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[folder].read_text(encoding="utf-8")))
    assert doc, f"{folder}/__init__.py needs a docstring saying what it owns"
    assert "import" in doc.lower(), f"{folder}'s docstring should say what it must not import"


def test_the_rule_sees_imports_inside_functions_and_for_typing() -> None:
    # the rule would be toothless if it only read top-level imports
    tree_imports = {
        target
        for module in MODULES
        for target, typing_only in EDGES.get(module, {}).items()
        if typing_only
    }
    assert tree_imports, "no TYPE_CHECKING import was seen"
