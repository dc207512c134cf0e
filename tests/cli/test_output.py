"""The CLI's rendering helpers and the progress display."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from cli_workspaces import DEPLOY, INVOICE, build_workspace, failing_phase_one
from rich.console import Console

from sandmem.cli._common import command_manager, open_workspace
from sandmem.cli._output import (
    flush_with_progress,
    render_tree,
    report_dict,
    report_incomplete,
    report_lines,
)
from sandmem.memory import EXTRACTIVE, FileSize, MemoryGenerateConfig
from sandmem.memory.manager import FlushReport
from sandmem.memory.storage import MemoryPaths

PATHS = MemoryPaths("memories", "sessions")


def test_render_tree() -> None:
    entries = [
        FileSize(path="memories/MEMORY.md", bytes=10),
        FileSize(path="memories/raw_memories/a.md", bytes=2048),
        FileSize(path="memories/raw_memories/b.md", bytes=3),
        FileSize(path="sessions/a.jsonl", bytes=5),
    ]
    assert render_tree(entries) == [
        "memories/",
        "├── MEMORY.md  10 B",
        "└── raw_memories/",
        "    ├── a.md  2.0 KB",
        "    └── b.md  3 B",
        "sessions/",
        "└── a.jsonl  5 B",
    ]


def test_report_rendering() -> None:
    report = FlushReport(
        processed=["b"],
        skipped=["c"],
        failed={"a": "RuntimeError: boom"},
        pending=["a", "b", "c", "d"],
        phase_two="failed",
        phase_two_error="consolidation left memories/MEMORY.md empty",
    )
    data = report_dict(report)
    assert data["not_reached"] == ["d"]
    assert report_incomplete(report)
    assert report_lines(report) == [
        "  ✓ b: extracted",
        "  - c: skipped (nothing worth remembering)",
        "  ✗ a: RuntimeError: boom",
        "  … d: not reached, still pending",
        "  consolidation failed (previous memory kept): consolidation left memories/MEMORY.md "
        "empty",
    ]
    assert not report_incomplete(FlushReport(phase_two="skipped"))
    assert report_lines(FlushReport(phase_two="skipped")) == [
        "  no pending conversations",
        "  nothing new to consolidate",
    ]


async def _flush_on_terminal(root: Path, out: io.StringIO) -> FlushReport:
    config = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
    console = Console(file=out, force_terminal=True, width=100)
    async with open_workspace(root) as session:
        manager = command_manager(session, PATHS, config)
        return await flush_with_progress(manager, console)


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    failing = MemoryGenerateConfig(phase_one_model=failing_phase_one(), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "ws", [INVOICE, DEPLOY], failing)
    out = io.StringIO()
    report = asyncio.run(_flush_on_terminal(root, out))
    assert sorted(report.processed) == ["deploy-notes", "invoice-fix"]
    assert report.phase_two == "done"
    assert "memory: " in out.getvalue()  # the live display was drawn (then cleared)
