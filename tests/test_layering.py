"""The package's layering, read from the code's own imports (top level, inside functions and
under ``TYPE_CHECKING``), as ``docs/architecture.md`` draws it.

- Every module belongs to a *floor* (``FLOORS``); a module imports only from its own floor or
  floors below it. Importing a package's ``__init__`` counts as importing that package's floor.
- No import cycle crosses a floor or a folder; inside one floor, a cycle is allowed only
  through imports made for typing (under ``TYPE_CHECKING``).
- A name a package imports on first use (a table of ``"sandmem.x"`` strings handed to
  ``importlib.import_module``) counts as a runtime import of that module.
"""

from __future__ import annotations

import ast
import re
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
            "sandmem._config_base",
            "sandmem._settings",
            "sandmem._retry",
            "sandmem._usage",
            "sandmem._truncate",
            "sandmem._prompts",
            "sandmem._docstrings",
            "sandmem._version",
            "sandmem._extras",
            "sandmem._lazy",
            "sandmem._log_lines",
            "sandmem._terminal",
            "sandmem._toml_file",
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
            # memory file access: every read, write, list, move and delete of a layout's files
            "sandmem.memory._files",
            "sandmem.memory.layout",
            "sandmem.memory.rollouts",
            "sandmem.memory.recording",
            "sandmem.memory.state",
            "sandmem.memory.selection",
            "sandmem.memory.journal",
            "sandmem.memory.history",
            "sandmem.memory.proposals",
            "sandmem.memory._run_review",
            "sandmem.memory.tombstones",
            "sandmem.memory._history_prune",
            # a secret's derived forms (slugs, keywords, names, cuts) for redaction
            "sandmem.memory._secret_forms",
            "sandmem.memory._redact_names",
            "sandmem.memory.verify",
            "sandmem.memory.read_prompt",
            "sandmem.memory.live_edit",
            "sandmem.memory._types",
            "sandmem.memory._json",
            "sandmem.memory._records",
            "sandmem.memory._text",
            "sandmem.memory._results",
            "sandmem.memory._render",
            "sandmem.memory._render_text",
            # scopes: the rules between project, personal and named memories; a read-only
            # scope's private copy; keeping a project's memory in git
            "sandmem.memory.scopes",
            "sandmem.memory._scope_copy",
            "sandmem.memory._git",
            # the store seam: MemoryLayoutConfig names it; moving a layout to and from a store
            # (memory/store/) is the floor above
            "sandmem.memory._store_seam",
        ),
    ),
    ("memory.store", ("sandmem.memory.store",)),
    ("memory.extractive", ("sandmem.memory.extractive",)),
    ("memory.generation", ("sandmem.memory.generation",)),
    ("memory.views", ("sandmem.memory.views",)),
    ("memory.ingestion", ("sandmem.memory.ingestion",)),
    (
        "memory.api",
        (
            "sandmem.memory",
            "sandmem.memory.api",
            "sandmem.memory.mcp",
        ),
    ),
    ("capabilities", ("sandmem.capabilities",)),
    ("distributed", ("sandmem.distributed",)),
    ("public", ("sandmem", "sandmem.testing", "sandmem.mcp")),
    ("apps", ("sandmem.eval", "sandmem.demo")),
    ("cli", ("sandmem.cli",)),
]
RANK = {name: rank for rank, (name, _) in enumerate(FLOORS)}
#: packages whose folder is split between floors: their prefix places the package alone, so
#: every module in the folder needs its own entry in ``FLOORS`` (a new one is not silently put
#: on the package's floor)
SPLIT = ("sandmem", "sandmem.memory")


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
            inside = prefix not in SPLIT and module.startswith(prefix + ".")
            matches = module == prefix or inside
            if matches and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    assert best is not None, f"{module} belongs to no floor: add it to FLOORS"
    return best


def _resolve(name: str, known: set[str] | dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _type_only_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        # ``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:`` (not ``if not TYPE_CHECKING:``)
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name != "TYPE_CHECKING":
            continue
        for child in node.body:
            for sub in ast.walk(child):
                if hasattr(sub, "lineno"):
                    lines.add(sub.lineno)
    return lines


_MODULE_STRING = re.compile(r"^sandmem(\.\w+)*(:\w+)?$")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, relative ones made absolute from ``package``."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return base


def edges_of(
    module: str, source: str, *, is_package: bool, known: set[str] | dict[str, Path]
) -> dict[str, bool]:
    """The ``sandmem`` modules ``source`` imports -> True when every import of one is for
    typing only. Reads imports at any depth (functions, ``TYPE_CHECKING`` blocks) and the
    modules a package imports on first use: a dict whose values are all ``"sandmem.x"`` /
    ``"sandmem.x:name"`` strings (a lazy-export table), or such a string handed straight to
    ``import_module``."""
    tree = ast.parse(source)
    typing_lines = _type_only_lines(tree)
    package = module if is_package else module.rpartition(".")[0]
    found: dict[str, bool] = {}

    def add(target: str, typing_only: bool) -> None:
        if not target.startswith("sandmem"):
            return
        resolved = _resolve(target, known)
        if resolved is None or resolved == module:
            return
        found[resolved] = found.get(resolved, True) and typing_only

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno in typing_lines)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in known else base, node.lineno in typing_lines)
        else:
            for name in _lazy_names(node):
                add(name.partition(":")[0], False)
    return found


def _module_string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _MODULE_STRING.match(node.value):
            return node.value
    return None


def _lazy_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Dict) and node.values:
        names = [_module_string(value) for value in node.values]
        return [n for n in names if n is not None] if all(names) else []
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        name = _module_string(node.args[0])
        if called == "import_module" and name is not None:
            return [name]
    return []


def import_edges() -> dict[str, dict[str, bool]]:
    """module -> {imported module: True when every import of it is for typing only}."""
    edges: dict[str, dict[str, bool]] = defaultdict(dict)
    for module, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        is_package = path.name == "__init__.py"
        edges[module] = edges_of(module, source, is_package=is_package, known=MODULES)
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


def _folder(module: str) -> Path:
    return MODULES[module].parent


def test_no_cycle_crosses_a_floor_or_a_folder() -> None:
    """Typing imports count here too: only a cycle inside one folder and one floor may run
    through them."""
    graph = {module: set(targets) for module, targets in EDGES.items()}
    crossing = [
        c
        for c in _cycles(graph)
        if len({floor_of(m) for m in c}) > 1 or len({_folder(m) for m in c}) > 1
    ]
    assert crossing == []


def test_no_runtime_cycle_inside_a_floor() -> None:
    graph = {
        module: {target for target, typing_only in targets.items() if not typing_only}
        for module, targets in EDGES.items()
    }
    assert _cycles(graph) == []


#: folders whose modules import one way: no cycle at all, not even through typing imports
ONE_WAY = ("sandmem.memory.generation",)


@pytest.mark.parametrize("folder", ONE_WAY)
def test_no_cycle_inside_a_one_way_folder(folder: str) -> None:
    """A flush is read top down: the manager, the phase drivers, then what they use."""
    inside = {m for m in MODULES if m == folder or m.startswith(folder + ".")}
    graph = {m: {t for t in EDGES[m] if t in inside and t != folder} for m in inside}
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_typing_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "folder", sorted({m for m, p in MODULES.items() if p.name == "__init__.py"})
)
def test_each_folder_opens_with_its_boundary(folder: str) -> None:
    """The docstring's first paragraph says what the folder owns and what it must not import."""
    doc = ast.get_docstring(ast.parse(MODULES[folder].read_text(encoding="utf-8")))
    assert doc, f"{folder}/__init__.py needs a docstring saying what it owns"
    opening = doc.split("\n\n", 1)[0].lower()
    assert "owns" in opening, f"{folder}'s docstring should open with what it owns"
    assert "import" in opening, f"{folder}'s docstring should open with what it must not import"


_SAMPLE = """
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING
if not TYPE_CHECKING:
    from sandmem.agent import _at_runtime
from . import _sibling
from .._up import thing
if TYPE_CHECKING:
    from sandmem.agent import _typed
_LAZY = {"Name": "sandmem.run._lazy_target:Name", "Other": "sandmem.run._lazy_other"}
_SPAN = {"sandmem.agent.attribute": 1}
logger_name = "sandmem.agent"
def late() -> None:
    from sandmem.memory import _in_function
    importlib.import_module(_LAZY["Name"])
    importlib.import_module("sandmem.run._called")
"""


def test_the_reader_sees_every_kind_of_import() -> None:
    """Relative, in a function, under ``TYPE_CHECKING``, and a lazy table's strings."""
    known = {
        "sandmem.memory",
        "sandmem.memory.views",
        "sandmem.memory.views._sibling",
        "sandmem.memory._up",
        "sandmem.agent",
        "sandmem.agent._typed",
        "sandmem.agent._at_runtime",
        "sandmem.run._lazy_target",
        "sandmem.run._lazy_other",
        "sandmem.run._called",
        "sandmem.memory._in_function",
    }
    found = edges_of("sandmem.memory.views._x", _SAMPLE, is_package=False, known=known)
    assert found == {
        "sandmem.memory.views._sibling": False,
        "sandmem.memory._up": False,
        "sandmem.agent._typed": True,
        "sandmem.agent._at_runtime": False,
        "sandmem.run._lazy_target": False,
        "sandmem.run._lazy_other": False,
        "sandmem.run._called": False,
        "sandmem.memory._in_function": False,
    }


def test_the_package_has_typing_and_in_function_imports_to_check() -> None:
    # the rules would be toothless if the package's own imports were not read
    typing_only = [t for targets in EDGES.values() for t, only in targets.items() if only]
    assert typing_only, "no TYPE_CHECKING import was seen"
    assert "sandmem.memory.generation._redact_pass" in EDGES["sandmem.memory.generation._stop"]


def _private_imports_of(package: str, source: str, *, module: str, is_package: bool) -> list[str]:
    """What ``source`` imports from ``package`` that is private: a module of it whose name
    starts with ``_``, or a ``_name`` taken from it (``from package import _x``)."""
    found: list[str] = []
    base_package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, base_package)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            names = [name.partition(":")[0] for name in _lazy_names(node)]
        for name in names:
            if name != package and not name.startswith(package + "."):
                continue
            rest = name[len(package) + 1 :].split(".") if name != package else []
            if any(part.startswith("_") for part in rest):
                found.append(name)
    return found


_API = "sandmem.memory.api"


def test_nothing_outside_the_memory_api_imports_a_private_name_of_it() -> None:
    """The MCP server, ``sandmem.memory``, the CLI and the tests take the memory API's public
    names (``open_target``, ``generation_manager``, ...) from ``sandmem.memory.api``."""
    tests = Path(__file__).resolve().parent
    sources = [(m, p, p.name == "__init__.py") for m, p in MODULES.items()]
    sources += [(f"tests.{p.stem}", p, False) for p in tests.rglob("*.py")]
    wrong = [
        f"{module} imports {name}"
        for module, path, is_package in sources
        if not (module == _API or module.startswith(_API + "."))
        for name in _private_imports_of(
            _API, path.read_text(encoding="utf-8"), module=module, is_package=is_package
        )
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "source",
    [
        "from sandmem.memory.api._target import open_target",
        "from sandmem.memory.api import _secret",
        "import sandmem.memory.api._looking",
        "from sandmem.memory import api as _a\nx = {'a': 'sandmem.memory.api._changing:generate'}",
    ],
)
def test_the_private_name_rule_sees_each_kind_of_import(source: str) -> None:
    found = _private_imports_of(_API, source, module="sandmem.memory.mcp._x", is_package=False)
    assert found != []


def test_the_private_name_rule_lets_public_names_through() -> None:
    source = "from sandmem.memory.api import open_target\nfrom sandmem.memory import api\n"
    assert _private_imports_of(_API, source, module="sandmem.memory.mcp._x", is_package=False) == []


_VIEWS = "sandmem.memory.views"


def test_views_never_import_generation() -> None:
    """Looking at memory never runs (or even loads) the pipeline that writes it."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in EDGES.items()
        if module == _VIEWS or module.startswith(_VIEWS + ".")
        for target in targets
        if target.startswith("sandmem.memory.generation")
    ]
    assert wrong == []


#: the writing functions of memory's core modules: what a view must never call
WRITERS: dict[str, frozenset[str]] = {
    "sandmem.memory._files": frozenset({"write", "append", "mkdir", "remove", "rename"}),
    "sandmem.memory.state": frozenset({"save", "save_selection", "save_settled", "append_log"}),
    "sandmem.memory.layout": frozenset({"ensure_layout", "make_way", "write_json"}),
    "sandmem.memory.tombstones": frozenset({"add", "remove"}),
    "sandmem.memory.journal": frozenset({"commit", "write_files", "notice"}),
}
#: the views that may write, and why: the derived layout index is data the views keep
VIEW_WRITERS = {"sandmem.memory.views._index": "writes and removes its own .index.sqlite"}


def writes_of(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The calls or imports of a function of ``WRITERS`` in ``source``: through the module
    (``_files.write``, also under another name) or taken by name from it."""
    package = module if is_package else module.rpartition(".")[0]
    aliases: dict[str, str] = {}
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in WRITERS:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in WRITERS:
                    aliases[alias.asname or alias.name] = full
                elif alias.name in WRITERS.get(base, ()):
                    found.append(full)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = aliases.get(node.value.id)
            if owner is not None and node.attr in WRITERS[owner]:
                found.append(f"{owner}.{node.attr}")
    return found


def test_views_only_read() -> None:
    wrong = [
        f"{module} uses {name}"
        for module, path in MODULES.items()
        if (module == _VIEWS or module.startswith(_VIEWS + ".")) and module not in VIEW_WRITERS
        for name in writes_of(path.read_text(encoding="utf-8"), module)
    ]
    assert wrong == []
    assert writes_of(MODULES["sandmem.memory.views._index"].read_text(encoding="utf-8"), "x.y")


@pytest.mark.parametrize(
    "source",
    [
        "from sandmem.memory import _files\nasync def f(s):\n    await _files.write(s, 'a', b'')",
        "from sandmem.memory import _files as fa\nfa.remove",
        "from sandmem.memory._files import write",
        "from .._files import rename",
        "from sandmem.memory import state as gen_state\ngen_state.save_selection",
        "import sandmem.memory.journal as j\nj.commit",
        "from sandmem.memory import tombstones\ntombstones.add",
    ],
)
def test_the_write_rule_sees_each_kind_of_write(source: str) -> None:
    assert writes_of(source, "sandmem.memory.views._x") != []


def test_the_write_rule_lets_reads_through() -> None:
    source = (
        "from sandmem.memory import _files, tombstones\nfrom sandmem.memory import state as s\n"
        "_files.read\n_files.listdir\ntombstones.load\ns.load\ns.read_log\n"
    )
    assert writes_of(source, "sandmem.memory.views._x") == []
