"""The CLI's rendering helpers and the progress display."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest
from cli_workspaces import DEPLOY, INVOICE, build_workspace, failing_phase_one
from rich.console import Console

from sandmem.cli import _live
from sandmem.cli._memory_cmd import render_tree
from sandmem.cli._output import (
    incomplete_error,
    incomplete_text,
    progress_display,
    report_lines,
)
from sandmem.memory import (
    EXTRACTIVE,
    FileSize,
    GenerationProgress,
    GenerationReport,
    GenerationUsage,
    MemoryGenerateConfig,
    TokenUsage,
    generate,
)

NO_USAGE = GenerationUsage(
    phase_one=TokenUsage(requests=0, input_tokens=0, output_tokens=0),
    phase_two=TokenUsage(requests=0, input_tokens=0, output_tokens=0),
)


def report(**fields: object) -> GenerationReport:
    base: dict[str, object] = {
        "processed": [],
        "skipped": [],
        "failed": {},
        "not_reached": [],
        "phase_two": "skipped",
        "phase_two_error": None,
        "timed_out": False,
        "usage": NO_USAGE,
        "complete": True,
    }
    return GenerationReport.model_validate(base | fields)


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
    failed = report(
        processed=["b"],
        skipped=["c"],
        failed={"a": "RuntimeError: boom"},
        failure_kinds={"a": "rollout"},
        not_reached=["d"],
        phase_two="failed",
        phase_two_error="consolidation left memories/MEMORY.md empty",
        complete=False,
    )
    assert report_lines(failed) == [
        "  ✓ b: extracted",
        "  - c: skipped (nothing worth remembering)",
        "  ✗ a: RuntimeError: boom",
        "  … d: not reached, still pending",
        "  consolidation failed (previous memory kept): consolidation left memories/MEMORY.md "
        "empty",
    ]
    assert incomplete_text(failed) == (
        "1 conversation(s) failed: a, consolidation failed (previous memory kept)"
    )
    assert "run `sandmem memory generate` again" in str(incomplete_error(failed))
    fine = report()
    assert incomplete_text(fine) == ""
    assert report_lines(fine) == ["  no pending conversations", "  nothing new to consolidate"]


def test_report_rendering_of_waiting_and_incomplete_runs() -> None:
    waiting = report(
        failed={"a": "APIConnectionError: refused"},
        failure_kinds={"a": "environment"},
        deferred=["b"],
        phase_two="incomplete",
        phase_two_missing=["c"],
        problems={"sessions/x.jsonl": "not UTF-8"},
        timed_out=True,
        usage=NO_USAGE.model_copy(
            update={"phase_one": TokenUsage(requests=2, input_tokens=1200, output_tokens=80)}
        ),
        complete=False,
    )
    assert report_lines(waiting) == [
        "  ✗ a: APIConnectionError: refused (server problem: no attempt used, retried later)",
        "  … b: waiting to retry after a server problem",
        "  ! sessions/x.jsonl: left out: not UTF-8",
        "  consolidation incomplete (what was written is kept)",
        "  pending for the next consolidation: c",
        "  generation timed out; unfinished conversations stay pending",
        "  tokens: phase one 1,200 in / 80 out, phase two 0 in / 0 out",
    ]
    assert incomplete_text(waiting) == (
        "1 conversation(s) failed: a, consolidation incomplete (what was written is kept; "
        "pending: c), generation timed out"
    )


async def _generate_on_terminal(root: Path, out: io.StringIO) -> GenerationReport:
    config = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
    console = Console(file=out, force_terminal=True, width=100)
    with progress_display(console) as progress:
        assert progress is not None
        return await generate(root, config=config, progress=progress)


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    failing = MemoryGenerateConfig(phase_one_model=failing_phase_one(), phase_two_model=EXTRACTIVE)
    root = build_workspace(tmp_path / "ws", [INVOICE, DEPLOY], failing)
    out = io.StringIO()
    result = asyncio.run(_generate_on_terminal(root, out))
    assert result.processed == ["deploy-notes", "invoice-fix"]
    assert result.phase_two == "done"
    assert "memory: " in out.getvalue()  # the live display was drawn (then cleared)


def test_off_a_terminal_progress_is_a_heartbeat_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_live, "HEARTBEAT_S", 0.05)
    out = io.StringIO()
    with progress_display(Console(file=out)) as progress:
        assert progress is not None
        progress(GenerationProgress(0, 2, "extracting"))
        assert out.getvalue() == ""  # no line for a step that just began
        time.sleep(0.06)
        progress(GenerationProgress(0, 2, "extracting"))
        progress(GenerationProgress(2, 2, "consolidating"))
        time.sleep(0.06)
        progress(GenerationProgress(2, 2, "consolidating"))
    assert out.getvalue().splitlines() == [
        "… memory: still extracting conversations (0/2) (0 s)",
        "… memory: still consolidating (0 s)",
    ]
