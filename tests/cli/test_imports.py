"""The CLI is a thin layer over the public API: ``sandmem/cli/`` imports from
``sandmem.memory`` only the names in its ``__all__``, never from its submodules (private or
not), so the commands and the library can never disagree."""

from __future__ import annotations

import ast
from pathlib import Path

import sandmem.cli
from sandmem import memory

CLI_DIR = Path(sandmem.cli.__file__).parent


def memory_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every import of ``sandmem.memory`` or a submodule in ``path``
    (at any depth: imports inside functions count)."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "sandmem":
                found += [("sandmem", a.name) for a in node.names if a.name == "memory"]
            elif node.module.startswith("sandmem.memory"):
                found += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "*") for a in node.names if a.name.startswith("sandmem.memory")]
    return found


def violations(path: Path) -> set[tuple[str, str]]:
    bad = set()
    for module, name in memory_imports(path):
        if module == "sandmem" or (module == "sandmem.memory" and name in memory.__all__):
            continue
        bad.add((module, name))
    return bad


def test_cli_imports_only_the_public_memory_api() -> None:
    modules = sorted(CLI_DIR.glob("*.py"))
    assert {p.name for p in modules} >= {"_memory_cmd.py", "_generate_cmd.py"}
    for path in modules:
        bad = violations(path)
        assert not bad, f"{path.name} imports private memory code: {sorted(bad)}"


def test_the_memory_commands_use_nothing_but_the_api() -> None:
    for name in (
        "_memory_cmd.py",
        "_generate_cmd.py",
        "_view_cmd.py",
        "_run_cmd.py",
        "_history_cmd.py",
    ):
        imports = memory_imports(CLI_DIR / name)
        assert imports and all(m == "sandmem.memory" for m, _ in imports), name


def test_the_check_sees_private_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from sandmem.memory import status, MemoryPaths\n"
        "from sandmem.memory.views._search import search_layout\n"
        "import sandmem.memory.layout\n"
        "def f():\n    from sandmem.memory.views._status import read_log\n"
    )
    assert violations(sample) == {
        ("sandmem.memory", "MemoryPaths"),
        ("sandmem.memory.views._search", "search_layout"),
        ("sandmem.memory.layout", "*"),
        ("sandmem.memory.views._status", "read_log"),
    }
