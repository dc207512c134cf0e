"""Memory maintenance: listing files, rollout statuses, status data, forgetting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import phase_one_model, phase_two_model, scripted_agent

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, UserError
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.api import forget_rollout
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.state import read_log
from sandmem.memory.views._status import (
    layout_files,
    memory_status,
    rollout_statuses,
    rollout_summary_files,
    token_totals,
)
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call

PATHS = MemoryPaths("memories", "sessions")


def failing(message: str = "boom") -> FunctionModel:
    def fn(request: object) -> str:
        raise RuntimeError(message)

    return FunctionModel(fn)


def config(**overrides: object) -> MemoryGenerateConfig:
    values: dict[str, object] = {
        "phase_one_model": phase_one_model(),
        "phase_two_model": phase_two_model(),
    }
    values.update(overrides)
    return MemoryGenerateConfig(**values)  # type: ignore[arg-type]


async def record(session: SandboxSession, cfg: MemoryGenerateConfig, rid: str, prompt: str) -> None:
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": "true"})], lambda r: "ok"
        ),
        capabilities=[Memory(generate=cfg), Filesystem(), Shell()],
    )
    run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent, prompt, run_config=run_config, conversation_id=rid)


async def open_session(root: Path) -> SandboxSession:
    """A session on ``root`` used in place (created when missing)."""
    return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))


async def test_layout_files_lists_visible_files_with_sizes(tmp_path: Path) -> None:
    cfg = config()
    async with await open_session(tmp_path) as session:
        await record(session, cfg, "fix-1", "Fix the bug")
        await get_manager(session, PATHS, cfg).flush()
        files = {f.path: f.size for f in await layout_files(session, PATHS)}
    assert files["memories/MEMORY.md"] == (tmp_path / "memories/MEMORY.md").stat().st_size
    assert "sessions/fix-1.jsonl" in files and "memories/raw_memories/fix-1.md" in files
    assert not any("/." in path for path in files)
    assert (tmp_path / "memories/.consolidated_MEMORY.md").exists()
    assert list(files) == sorted(files)


async def test_statuses_follow_the_manager(tmp_path: Path) -> None:
    cfg = config(phase_one_model=failing(), max_attempts=2)
    async with await open_session(tmp_path) as session:
        await record(session, cfg, "a", "first")
        manager = get_manager(session, PATHS, cfg)
        await manager.flush()
        [row] = await rollout_statuses(session, PATHS)
        assert (row["status"], row["attempts"], row["last_error"]) == (
            "pending",
            1,
            "RuntimeError: boom",
        )
        await manager.flush()
        [row] = await rollout_statuses(session, PATHS)
        assert (row["status"], row["attempts"]) == ("failed", 2)
        await record(session, cfg, "a", "second")  # a new segment: a fresh start
        [row] = await rollout_statuses(session, PATHS)
        assert (row["status"], row["attempts"], row["last_error"]) == ("pending", 0, None)
        assert row["segments"] == 2
        manager.detach_stop_hook()


async def test_status_after_a_failed_consolidation(tmp_path: Path) -> None:
    cfg = config(phase_two_model=failing("consolidator down"), phase_two_fallback=False)
    async with await open_session(tmp_path) as session:
        await record(session, cfg, "a", "first")
        manager = get_manager(session, PATHS, cfg)
        await manager.flush()
        manager.detach_stop_hook()
        data = (await memory_status(session, PATHS)).model_dump()
    assert data["counts"] == {"total": 1, "done": 1, "pending": 0, "failed": 0, "skipped": 0}
    last = data["last_consolidation"]
    assert last["status"] == "failed"
    assert "consolidator down" in last["error"]
    assert last["last_success_at"] is None and last["rollouts"] == 1
    one = data["tokens"]["phase_one"]
    assert one["runs"] == 1 and one["input_tokens"] > 0
    assert data["tokens"]["phase_two"] == {
        "runs": 1,
        "failed_runs": 1,
        "requests": 1,
        "input_tokens": 0,
        "output_tokens": 0,
    }
    assert data["files"]["MEMORY.md"]["bytes"] == 0


async def test_status_of_an_empty_layout(tmp_path: Path) -> None:
    async with await open_session(tmp_path) as session:
        data = (await memory_status(session, PATHS)).model_dump()
    assert data["counts"]["total"] == 0
    assert data["last_consolidation"] is None
    assert data["files"]["MEMORY.md"]["bytes"] is None
    assert data["dirs"]["sessions"] == {"path": "sessions", "files": 0, "bytes": 0}
    assert not (tmp_path / "memories").exists() and not (tmp_path / "sessions").exists()


def test_token_totals() -> None:
    records: list[dict[str, Any]] = [
        {"phase": "one", "status": "done", "requests": 2, "input_tokens": 10, "output_tokens": 2},
        {"phase": "one", "status": "pending", "input_tokens": 0, "output_tokens": 0},
        {"phase": "two", "status": "done", "input_tokens": 100, "output_tokens": 20},
        {"phase": "three", "input_tokens": 5},
        {"phase": "one", "input_tokens": "many"},
    ]
    assert token_totals(records).model_dump() == {
        "phase_one": {
            "runs": 3,
            "failed_runs": 1,
            "requests": 2,
            "input_tokens": 10,
            "output_tokens": 2,
        },
        "phase_two": {
            "runs": 1,
            "failed_runs": 0,
            "requests": 0,
            "input_tokens": 100,
            "output_tokens": 20,
        },
    }


async def test_read_log_skips_malformed_lines(tmp_path: Path) -> None:
    (tmp_path / "memories").mkdir()
    (tmp_path / "memories/generation_log.jsonl").write_text('{"phase": "one"}\nnot json\n[1]\n{"ph')
    async with await open_session(tmp_path) as session:
        assert await read_log(session, PATHS) == [{"phase": "one"}]


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
