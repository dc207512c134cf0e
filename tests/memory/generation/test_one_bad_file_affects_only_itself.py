"""Issue 14 (4), (9): one bad file affects only itself — it is reported with its path and
reason and everything else is processed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memory_doubles import phase_one_model, phase_two_model

from sandmem.cli._output import report_lines
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.api import generation_report as api_report
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views._status import memory_status
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")


def segment(rid: str, task: str) -> str:
    return json.dumps(
        {
            "updated_at": "2026-01-01T00:00:00Z",
            "rollout_id": rid,
            "input": [{"role": "user", "content": task}],
            "generated_items": [],
            "terminal_metadata": {"terminal_state": "completed"},
        }
    )


def build(root: Path, outside: Path) -> None:
    sessions, memories = root / "sessions", root / "memories"
    (memories / "raw_memories").mkdir(parents=True)
    sessions.mkdir(parents=True)
    for rid in ("good-1", "good-2"):
        (sessions / f"{rid}.jsonl").write_text(segment(rid, f"task of {rid}") + "\n")
    deep = "[" * 200_000 + "]" * 200_000
    (sessions / "deep.jsonl").write_text(segment("deep", "deep task") + "\n" + deep + "\n")
    (sessions / "a-directory.jsonl").mkdir()
    (outside / "secret.jsonl").write_text(segment("x", "outside the workspace") + "\n")
    os.symlink(outside / "secret.jsonl", sessions / "a-symlink.jsonl")
    (outside / "raw.md").write_text("rollout_id: escaped\nupdated_at: 2026\n\n- outside secret\n")
    os.symlink(outside / "raw.md", memories / "raw_memories/escaped.md")
    (memories / "raw_memories/garbage.md").write_bytes(b"\x00\xff\xfe binary \x89PNG" * 40)
    (memories / "phase_two_selection.json").write_text('{"version": 1, "selected": 5}')
    state: dict[str, Any] = {
        "version": 1,
        "rollouts": {
            "good-1": "pending",
            "good-2": {"attempts": "many"},
            "deep": 7,
            "a-directory": [1, 2],
        },
    }
    (memories / "generation_state.json").write_text(json.dumps(state))


async def test_each_bad_file_is_reported_and_the_rest_is_processed(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    build(root, outside)
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        manager = get_manager(session, PATHS, config)
        manager.detach_stop_hook()
        report = await manager.flush()
        again = await manager.flush()
        status = await memory_status(session, PATHS)
    assert {"good-1", "good-2"} <= set(report.processed)
    assert report.phase_two == "done", report.phase_two_error
    problems = report.problems
    for path in (
        "sessions/a-directory.jsonl",
        "sessions/a-symlink.jsonl",
        "memories/raw_memories/escaped.md",
        "memories/raw_memories/garbage.md",
        "memories/phase_two_selection.json",
        "memories/generation_state.json",
    ):
        assert any(p == path for p in problems), (path, problems)
    assert "not UTF-8" in problems["memories/raw_memories/garbage.md"]
    # nothing of the bad files reaches the consolidation
    raw = (root / "memories/raw_memories.md").read_text()
    assert "task of good-1" in raw and "task of good-2" in raw
    assert "outside secret" not in raw and "binary" not in raw
    assert "outside the workspace" not in (root / "memories/MEMORY.md").read_text()
    assert (outside / "raw.md").read_text().endswith("- outside secret\n")  # untouched
    # the derived files were rebuilt
    selection = json.loads((root / "memories/phase_two_selection.json").read_text())
    assert {"good-1", "good-2"} <= {s["rollout_id"] for s in selection["selected"]}
    state = json.loads((root / "memories/generation_state.json").read_text())
    assert state["rollouts"]["good-1"]["status"] == "done"
    assert state["rollouts"]["good-2"]["status"] == "done"
    # the next flush still works and has nothing left to do for the good ones
    assert again.processed == [] and again.phase_two == "skipped"
    assert status.counts.done >= 2
    lines = "\n".join(report_lines(api_report(report)))
    assert "! sessions/a-directory.jsonl: left out:" in lines
