"""Forgetting one conversation (``memory/api/_forget.py``): its files, state entry and summaries
go, memory is consolidated again without it, a pending one keeps the memory files, unknown and
invalid ids are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memory_doubles import doubles_config as config
from memory_doubles import failing_model as failing
from memory_doubles import open_session
from memory_doubles import record_run as record

from sandmem import UserError
from sandmem.memory.api import forget_rollout
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views._status import rollout_summary_files

PATHS = MemoryPaths("memories", "sessions")


async def test_forget_rollout(tmp_path: Path) -> None:
    cfg = config()
    async with await open_session(tmp_path) as session:
        await record(session, cfg, "keep-me", "Keep this conversation")
        await record(session, cfg, "drop-me", "Drop this conversation")
        manager = get_manager(session, PATHS, cfg)
        await manager.flush()
        assert "drop-me" in (tmp_path / "memories/MEMORY.md").read_text()
        old = tmp_path / "memories/rollout_summaries/drop-me_old-slug.md"
        old.write_text("session_id: drop-me\n\nan older summary\n")
        other = tmp_path / "memories/rollout_summaries/drop-me_2_fix.md"
        other.write_text("session_id: drop-me_2\n\nanother conversation's summary\n")
        assert len(await rollout_summary_files(session, PATHS, "drop-me")) == 2
        plan, report = await forget_rollout(session, PATHS, "drop-me", cfg)
        manager.detach_stop_hook()
    assert sorted(plan.files) == [
        "memories/raw_memories/drop-me.md",
        "memories/rollout_summaries/drop-me_fix-the-bug.md",
        "memories/rollout_summaries/drop-me_old-slug.md",
        "sessions/drop-me.jsonl",
    ]
    assert other.exists()
    assert report.phase_two == "done"
    memory_md = (tmp_path / "memories/MEMORY.md").read_text()
    assert "drop-me" not in memory_md and "keep-me" in memory_md
    state = json.loads((tmp_path / "memories/generation_state.json").read_text())
    assert list(state["rollouts"]) == ["keep-me"]
    selection = json.loads((tmp_path / "memories/phase_two_selection.json").read_text())
    assert [s["rollout_id"] for s in selection["selected"]] == ["keep-me"]


async def test_forget_a_pending_rollout_keeps_memory_files(tmp_path: Path) -> None:
    cfg = config(phase_one_model=failing())
    (tmp_path / "memories").mkdir(parents=True)
    (tmp_path / "memories/MEMORY.md").write_text("## Written by hand\n")
    async with await open_session(tmp_path) as session:
        await record(session, cfg, "only", "hello")
        manager = get_manager(session, PATHS, cfg)
        manager.detach_stop_hook()
        await manager.flush()
        plan, _ = await forget_rollout(session, PATHS, "only", cfg)
    assert plan.files == ["sessions/only.jsonl"]
    assert (tmp_path / "memories/MEMORY.md").read_text() == "## Written by hand\n"
    state = json.loads((tmp_path / "memories/generation_state.json").read_text())
    assert state["rollouts"] == {}


async def test_forget_refuses_unknown_and_invalid_ids(tmp_path: Path) -> None:
    cfg = config()
    async with await open_session(tmp_path) as session:
        with pytest.raises(UserError, match="no conversation 'ghost'"):
            await forget_rollout(session, PATHS, "ghost", cfg)
        with pytest.raises(UserError, match="invalid rollout id"):
            await forget_rollout(session, PATHS, "../memories", cfg)
        get_manager(session, PATHS, cfg).detach_stop_hook()
