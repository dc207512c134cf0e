"""The docs hold together: every relative link in ``README.md`` and ``docs/*.md`` points to an
existing file (and heading, for ``#anchors``); ``docs/index.md`` lists every page; and every
``python`` code block in ``README.md`` and in the reference pages below runs, offline.

Convention: a fenced block whose info string is ``python no-run`` is shown but not run. Use it
only for snippets that need an API key or a real model; everything else must run.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from python_forks import PythonForks

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
#: pages whose ``python`` blocks are run here: README (``tests/test_docs_examples.py`` runs
#: every ``python`` block of docs/, those of quickstart, concepts and configuration included)
RUN_BLOCKS_IN = ["README.md"]

_FENCE = re.compile(r"^(```+|~~~+)([^\n]*)\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, code) of every fenced block."""
    return [(m.group(2).strip(), m.group(3)) for m in _FENCE.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def relative_links(path: Path) -> list[str]:
    links = _LINK.findall(prose(path.read_text()))
    return [t for t in links if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def test_pages_exist() -> None:
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {
        "index.md",
        "quickstart.md",
        "concepts.md",
        "configuration.md",
        "file-formats.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_index_lists_every_page() -> None:
    index = ROOT / "docs/index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in relative_links(index)}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p != index and p not in linked]
    assert not missing, f"docs/index.md does not link {missing}"


def test_slug_matches_github() -> None:
    assert slug("Stop: hooks, then snapshot") == "stop-hooks-then-snapshot"
    assert slug("`MemoryGenerateConfig`") == "memorygenerateconfig"
    assert slug("Sandbox clients & snapshots") == "sandbox-clients--snapshots"


def runnable_blocks() -> list[object]:
    found: list[object] = []
    for rel in RUN_BLOCKS_IN:
        path = ROOT / rel
        if path.exists():
            for number, (info, code) in enumerate(code_blocks(path.read_text()), 1):
                if info == "python":
                    found.append(pytest.param(rel, code, id=f"{rel}:block{number}"))
    return found


def test_python_blocks_are_marked_run_or_no_run() -> None:
    odd = [
        f"{page.relative_to(ROOT)}: {info!r}"
        for page in PAGES
        for info, _ in code_blocks(page.read_text())
        if info.startswith("py") and info not in ("python", "python no-run")
    ]
    assert not odd, "use ```python or ```python no-run: " + ", ".join(odd)


def test_readme_has_runnable_code_and_few_no_run_blocks() -> None:
    blocks = code_blocks((ROOT / "README.md").read_text())
    assert any(info == "python" for info, _ in blocks)
    assert sum(info == "python no-run" for info, _ in blocks) <= 2


@pytest.mark.parametrize(("page", "code"), runnable_blocks())
def test_python_blocks_run(page: str, code: str, tmp_path: Path, python_forks: PythonForks) -> None:
    """As ``python block.py`` (a fork of a process that has imported sandmem)."""
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SANDMEM_"))}
    proc = python_forks.run([sys.executable, str(script)], timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"a block of {page} failed:\n{proc.stdout}{proc.stderr}"
