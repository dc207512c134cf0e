"""What a layout holds (``views/_status.py``): its files, the conversations' statuses, the
status data and token totals, the log read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_doubles import doubles_config as config
from memory_doubles import failing_model as failing
from memory_doubles import open_session
from memory_doubles import record_run as record

from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.state import read_log
from sandmem.memory.views._status import (
    layout_files,
    memory_status,
    rollout_statuses,
    token_totals,
)

PATHS = MemoryPaths("memories", "sessions")


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
