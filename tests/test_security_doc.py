"""``docs/security.md`` stays true to the code: every boundary in its table names a module that
exists (and the functions it names in that module are defined there) and test files that
exist; a renamed or deleted module or test fails here, not in a reader's hands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "sandmem"
DOC = ROOT / "docs" / "security.md"

_CODE = re.compile(r"`([^`]+)`")


def _rows() -> list[list[str]]:
    """The boundary table's rows (cells), header and rule left out."""
    rows = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("| ") or line.startswith(("| boundary", "| ---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append(cells)
    return rows


def _modules(cell: str) -> list[tuple[Path, list[str]]]:
    """Each module path a cell names (relative to ``src/sandmem``), with the names given in
    parentheses after it (``memory/_files.py`` (`lock`, `member`))."""
    found: list[tuple[Path, list[str]]] = []
    folder = PACKAGE
    for part in re.split(r"(?=`[\w/.]+\.py`|`[\w/]+/`)", cell):
        paths = [p for p in _CODE.findall(part) if p.endswith((".py", "/")) and " " not in p]
        if not paths:
            continue
        head = paths[0]
        rest = part.split(f"`{head}`", 1)[1]
        names: list[str] = []
        if rest.lstrip().startswith("("):
            inside = rest.lstrip()[1 : rest.lstrip().find(")")]
            names = [n for n in _CODE.findall(inside) if re.fullmatch(r"[A-Za-z_][\w.]*", n)]
        path = PACKAGE / head
        if "/" not in head and not path.exists():  # `a/_x.py` over `_y.py`: a's folder
            path = folder / head
        folder = path if head.endswith("/") else path.parent
        found.append((path, names))
    return found


def _tests(cell: str) -> list[Path]:
    """Each test file a cell names: ``tests/...py`` in full, or a bare ``test_x.py`` in the
    folder of the full name before it."""
    found: list[Path] = []
    folder = ROOT / "tests"
    for name in _CODE.findall(cell):
        if not name.endswith(".py") or " " in name:
            continue
        if name.startswith("tests/"):
            path = ROOT / name
            folder = path.parent
        elif name.startswith("test_"):
            path = folder / name
        else:
            continue
        found.append(path)
    return found


ROWS = _rows()


def test_the_table_lists_the_boundaries() -> None:
    assert len(ROWS) >= 20
    assert all(len(row) == 5 for row in ROWS), [row[0] for row in ROWS if len(row) != 5]


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_each_boundary_names_modules_and_tests_that_exist(row: list[str]) -> None:
    boundary, _who, _what, module_cell, test_cell = row
    modules = _modules(module_cell)
    assert modules, f"{boundary}: no module named"
    for path, names in modules:
        assert path.exists(), f"{boundary}: {path.relative_to(ROOT)} does not exist"
        if path.is_file():
            text = path.read_text()
            for name in names:
                last = name.rsplit(".", 1)[-1]
                assert re.search(
                    rf"\b(def|class)\s+{re.escape(last)}\b|\b{re.escape(last)}\s*[:=]", text
                ), f"{boundary}: {path.relative_to(ROOT)} defines no {name}"
    tests = _tests(test_cell)
    assert tests, f"{boundary}: no test file named"
    for path in tests:
        assert path.is_file(), f"{boundary}: {path.relative_to(ROOT)} does not exist"
