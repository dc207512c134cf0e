"""One file, one size: the demo, ``sandmem memory status``/``tree`` and the viewer all report
memory_summary.md's size on disk (``memory._files.size``), in the same form (issue 39, item
12: they showed 632, 772 and 771 bytes for one file)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from cli_workspaces import invoke

from sandmem._log_lines import human_size
from sandmem.demo._report import tree_lines
from sandmem.demo._scenario import _Setup, _show_memory
from sandmem.demo._verdict import Check, verdict
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

CONTENTS = [
    # trailing and leading whitespace (a stripped text is shorter)
    b"\n\n# Memory summary\n\n- tabs, not spaces\n\n\n",
    # multi-byte characters (characters are fewer than bytes)
    "# Memory summary\n\n- caf\u00e9 \u2192 na\u00efve \U0001f600\n".encode(),
    # invalid UTF-8 (a decoded and re-encoded text is longer)
    b"# Memory summary\n\n- \xff\xfe broken \xc3 bytes\n",
    # big enough for a unit
    b"# Memory summary\n\n" + b"- a line worth keeping\n" * 120,
]


async def _demo_sizes(root: Path) -> tuple[str, str, int]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        tree = "\n".join(await tree_lines(session, "memories"))
        out = io.StringIO()
        setup = _Setup(offline=True, out=out, base=root.parent, keep=False)
        summary, size = await _show_memory(setup, session)
    lines, _ = verdict(Check(True, "fixed"), None, summary, True, size)
    return tree, lines[1], size


@pytest.mark.parametrize("content", CONTENTS, ids=["spaces", "multibyte", "invalid", "kilo"])
def test_demo_cli_and_viewer_report_the_same_size(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "ws"
    (root / "memories").mkdir(parents=True)
    (root / "sessions").mkdir()
    (root / "memories" / "memory_summary.md").write_bytes(content)
    on_disk = len(content)
    shown = human_size(on_disk)

    tree, verdict_line, size = asyncio.run(_demo_sizes(root))
    assert size == on_disk
    assert f"memory_summary.md  ({shown})" in tree
    assert f"{shown})" in verdict_line and verdict_line.startswith("Memory carried to run 2: YES")

    status = invoke("memory", "status", "-w", root)
    assert status.exit_code == 0, status.output
    assert f"memories/memory_summary.md  {shown}" in status.stdout
    listed = invoke("memory", "tree", "-w", root)
    assert listed.exit_code == 0, listed.output
    assert f"memory_summary.md  {shown}" in listed.stdout

    out = tmp_path / "view.html"
    viewed = invoke("memory", "view", "-w", root, "--out", out)
    assert viewed.exit_code == 0, viewed.output
    assert f"memories/memory_summary.md, {shown}" in out.read_text(encoding="utf-8")
