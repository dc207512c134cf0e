"""Recording conversations without a generation manager (``memory.recording``): which names
in ``sessions_dir`` are rollouts, and one segment appended, redacted, under the sessions lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandmem.memory.layout import MemoryPaths
from sandmem.memory.recording import RolloutRecorder, rollout_id_of, rollout_ids
from sandmem.redaction import Redactor
from sandmem.sandboxes import SandboxSession

PATHS = MemoryPaths("memories", "sessions")
SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


@pytest.mark.parametrize(
    ("name", "rid"),
    [
        ("fix-bug.jsonl", "fix-bug"),
        ("a.b.jsonl", "a.b"),
        ("x--0123456789abcdef.jsonl", "x--0123456789abcdef"),
        (".fix-bug.jsonl", None),  # a write's temp
        (".lock", None),
        (".ingest.lock", None),
        ("notes.json", None),
        ("run.jsonl.tmp", None),
        ("sub/run.jsonl", None),  # nested: not a rollout of this directory
        (".jsonl", None),
    ],
)
def test_which_names_are_rollouts(name: str, rid: str | None) -> None:
    assert rollout_id_of(name) == rid


def segment(rid: str, text: str) -> dict[str, object]:
    return {
        "updated_at": "2026-05-01T10:00:00+00:00",
        "rollout_id": rid,
        "input": [{"role": "user", "content": text}],
        "generated_items": [{"role": "assistant", "content": "done"}],
        "terminal_metadata": {"terminal_state": "completed"},
    }


async def test_no_sessions_dir_lists_nothing(sandbox: SandboxSession) -> None:
    assert await rollout_ids(sandbox, PATHS) == []


async def test_a_segment_is_recorded_redacted_without_a_manager(sandbox: SandboxSession) -> None:
    recorder = RolloutRecorder(sandbox, PATHS, Redactor())
    await recorder.record(segment("b-run", f"use key {SECRET}"))
    await recorder.record(segment("a-run", "first"))
    await recorder.record(segment("b-run", "again"))
    root = Path(sandbox.root)
    (root / "sessions" / ".a-run.jsonl.tmp").write_text("{}\n")
    (root / "sessions" / ".hidden.jsonl").write_text("{}\n")
    assert await rollout_ids(sandbox, PATHS) == ["a-run", "b-run"]
    lines = (root / "sessions" / "b-run.jsonl").read_text().splitlines()
    assert [json.loads(line)["input"][0]["content"] for line in lines][1] == "again"
    assert SECRET not in lines[0] and "use key" in lines[0]
    assert (root / "memories" / "MEMORY.md").is_file()  # the layout was prepared


async def test_a_planted_link_is_moved_aside_not_followed(sandbox: SandboxSession) -> None:
    root = Path(sandbox.root)
    outside = root.parent / "outside.txt"
    outside.write_text("keep\n")
    (root / "sessions").mkdir(parents=True)
    os.symlink(outside, root / "sessions" / "r1.jsonl")
    await RolloutRecorder(sandbox, PATHS, Redactor()).record(segment("r1", "task"))
    assert outside.read_text() == "keep\n"
    assert not (root / "sessions" / "r1.jsonl").is_symlink()
    assert json.loads((root / "sessions" / "r1.jsonl").read_text())["rollout_id"] == "r1"


async def test_a_held_sessions_lock_times_out(sandbox: SandboxSession) -> None:
    from sandmem._errors import SandboxError

    recorder = RolloutRecorder(sandbox, PATHS, Redactor())
    await recorder.prepare()
    async with sandbox.lock("sessions/.lock"):
        with pytest.raises(SandboxError):
            await recorder.record(segment("r1", "task"), lock_timeout=0.1)
    assert await rollout_ids(sandbox, PATHS) == []
