"""How a flush finds its work: from file metadata (size, mtime) kept in the state, reading only
rollouts that changed, each pending rollout once; phase two skipped without reading when
nothing it reads changed; nothing rewritten by a flush with nothing to do."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from memory_doubles import phase_one_model, phase_two_model

from sandmem import SandboxSession
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation.manager import MemoryGenerationManager
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")


def _segment(rid: str, task: str, minute: int = 0) -> str:
    return (
        json.dumps(
            {
                "updated_at": f"2026-05-01T10:{minute:02d}:00+00:00",
                "rollout_id": rid,
                "input": [{"role": "user", "content": task}],
                "generated_items": [{"role": "assistant", "content": "done"}],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        )
        + "\n"
    )


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    await session.start()
    yield session
    await client.delete(session)


class _Reads:
    """Counts the files a session reads (through ``read_bytes`` and ``read_many``)."""

    def __init__(self, session: SandboxSession, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        read, read_many = session.read_bytes, session.read_many

        async def counting_read(path: str) -> bytes:
            self.counts[path] += 1
            return await read(path)

        async def counting_read_many(paths: Sequence[str]) -> dict[str, bytes | None]:
            self.counts.update(paths)
            return await read_many(paths)

        monkeypatch.setattr(session, "read_bytes", counting_read)
        monkeypatch.setattr(session, "read_many", counting_read_many)

    def of(self, prefix: str) -> dict[str, int]:
        return {p: n for p, n in self.counts.items() if p.startswith(prefix)}


def _manager(session: SandboxSession) -> MemoryGenerationManager:
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    return get_manager(session, PATHS, config)


async def test_each_pending_rollout_is_read_once_and_unchanged_ones_not_at_all(
    sandbox: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        await sandbox.write(PATHS.rollout_file(f"r{i}"), _segment(f"r{i}", f"task {i}"))
    manager = _manager(sandbox)
    reads = _Reads(sandbox, monkeypatch)
    first = await manager.flush()
    assert sorted(first.processed) == ["r0", "r1", "r2"] and first.phase_two == "done"
    assert reads.of("sessions/") == {PATHS.rollout_file(f"r{i}"): 1 for i in range(3)}

    reads.counts.clear()
    state_file = sandbox.root / PATHS.state_json
    before = state_file.stat().st_mtime_ns
    second = await manager.flush()
    assert second.processed == [] and second.phase_two == "skipped"
    assert reads.of("sessions/") == {}, "unchanged rollouts are not read"
    assert reads.of("memories/raw_memories/") == {}, "nor their raw memories"
    assert state_file.stat().st_mtime_ns == before, "nothing to do: the state is not rewritten"

    await sandbox.append(PATHS.rollout_file("r1"), _segment("r1", "more work", minute=5))
    reads.counts.clear()
    third = await manager.flush()
    assert third.processed == ["r1"] and third.phase_two == "done"
    assert reads.of("sessions/") == {PATHS.rollout_file("r1"): 1}


async def test_a_rewrite_of_the_same_size_is_seen_by_its_mtime(sandbox: SandboxSession) -> None:
    path = PATHS.rollout_file("r0")
    await sandbox.write(path, _segment("r0", "task A", minute=1))
    manager = _manager(sandbox)
    assert (await manager.flush()).processed == ["r0"]
    host = sandbox.root / path
    stat = host.stat()
    await sandbox.write(path, _segment("r0", "task B", minute=2))  # same length, new content
    assert host.stat().st_size == stat.st_size
    os.utime(host, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    assert (await manager.flush()).processed == ["r0"]


async def test_a_deleted_raw_memory_makes_its_rollout_pending_again(
    sandbox: SandboxSession,
) -> None:
    await sandbox.write(PATHS.rollout_file("r0"), _segment("r0", "task"))
    manager = _manager(sandbox)
    assert (await manager.flush()).processed == ["r0"]
    await sandbox.remove(PATHS.raw_memory_file("r0"))
    again = await manager.flush()
    assert again.processed == ["r0"]
    assert await sandbox.exists(PATHS.raw_memory_file("r0"))


async def test_phase_two_runs_again_when_what_it_reads_changes(sandbox: SandboxSession) -> None:
    for i in range(2):
        await sandbox.write(PATHS.rollout_file(f"r{i}"), _segment(f"r{i}", f"task {i}"))
    manager = _manager(sandbox)
    assert (await manager.flush()).phase_two == "done"
    assert (await manager.flush()).phase_two == "skipped"
    await sandbox.remove(PATHS.raw_memory_file("r0"))
    await sandbox.remove(PATHS.rollout_file("r0"))  # forgotten: r0 must leave MEMORY.md
    report = await manager.flush()
    assert report.phase_two == "done"
    state = json.loads((sandbox.root / PATHS.state_json).read_text())
    assert json.loads(state["phase_two"]["selection"])["removed"] == ["r0"]
