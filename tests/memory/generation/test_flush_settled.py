"""A flush with nothing to do tells so from directory listings alone: after one flush found
nothing to do (``.settled.json``), the next one reads no state file and no rollout while the
files are exactly as it saw them, and does the full check as soon as anything a flush reads
changed — an append to a rollout file, a raw memory replaced, the state or selection file,
phase two's cap — or when it must retry failed rollouts."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from memory_doubles import segment_line as _segment

from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory import state as gen_state
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation.manager import FlushReport, MemoryGenerationManager
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


#: a moment two minutes ago: a file changed in the last two seconds is never trusted
PAST = time.time() - 120


def _age(root: Path) -> None:
    """Date every file and directory back to ``PAST`` (the same moment each time)."""
    past = PAST
    for path in sorted(root.rglob("*"), reverse=True):  # a directory after what it holds
        os.utime(path, (past, past), follow_symlinks=False)


class _Loads:
    """Counts the reads of the state file (the full check starts with one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        load = gen_state.load

        async def counting(session: SandboxSession, paths: MemoryPaths) -> object:
            self.count += 1
            return await load(session, paths)

        monkeypatch.setattr(gen_state, "load", counting)


@pytest.fixture
async def settled(tmp_path: Path) -> AsyncIterator[tuple[Path, MemoryGenerationManager]]:
    """A layout of two extracted and consolidated conversations, aged, after a flush that
    found nothing to do."""
    root = tmp_path / "ws"
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        for number, rid in enumerate(("invoice", "deploy")):
            await session.write(PATHS.rollout_file(rid), _segment(rid, f"Fix the {rid}", number))
        manager = get_manager(session, PATHS, EXTRACT)
        manager.detach_stop_hook()
        first = await manager.flush()
        assert sorted(first.processed) == ["deploy", "invoice"]
        _age(root)
        assert _idle(await manager.flush())  # records the aged files' stats in the state
        _age(root)
        assert _idle(await manager.flush())  # the full check: nothing to do, so it says so
        assert (root / PATHS.settled_json).exists()
        yield root, manager


def _idle(report: FlushReport) -> bool:
    return report == FlushReport(phase_two="skipped")


async def test_an_unchanged_layout_is_settled_from_listings(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, manager = settled
    await api.search(root, "invoice")  # looking at memory rewrites only the derived index
    loads = _Loads(monkeypatch)
    assert _idle(await manager.flush())
    assert _idle(await manager.flush(wait_backoff=False))
    assert loads.count == 0


async def test_an_append_to_a_rollout_is_extracted(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, manager = settled
    loads = _Loads(monkeypatch)
    rollout = root / PATHS.rollout_file("invoice")
    with rollout.open("a") as f:  # in place: no rename, the directory unchanged
        f.write(_segment("invoice", "Also round the tax", 30))
    os.utime(rollout, (PAST + 1, PAST + 1))  # old enough to trust: the listing tells it
    report = await manager.flush()
    assert report.processed == ["invoice"] and loads.count == 1
    assert not (root / PATHS.settled_json).exists()  # what it certified changed


async def test_a_raw_memory_replaced_is_checked(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sandmem writes raw memories whole (a temp renamed over the file): their directory's
    mtime moves, so the listings tell it without a ``stat`` per raw memory."""
    root, manager = settled
    loads = _Loads(monkeypatch)
    raw = PATHS.raw_memory_file("deploy")
    text = (root / raw).read_text()
    await manager.session.write(raw, text.replace("segments: 1", "segments: 9"))
    for path in (root / raw, root / PATHS.raw_dir):
        os.utime(path, (PAST + 1, PAST + 1))  # old enough to trust
    report = await manager.flush()
    assert loads.count == 1
    assert report.processed == ["deploy"]  # no longer up to date: extracted again


async def test_a_raw_memory_edited_in_place_is_repaired_by_the_next_full_check(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw memory edited in place by hand (same name, same directory) is not seen by a
    settled flush (raw memories are not ``stat``-ed there); the next flush that checks
    everything extracts it again before phase two can read it."""
    root, manager = settled
    raw = root / PATHS.raw_memory_file("deploy")
    with raw.open("r+") as f:  # same size, same directory entry: only the file's mtime moves
        text = f.read()
        f.seek(0)
        f.write(text.replace("segments: 1", "segments: 9"))
    os.utime(raw, (PAST + 1, PAST + 1))
    assert _idle(await manager.flush())
    await manager.session.write(PATHS.rollout_file("tax"), _segment("tax", "Fix the tax", 7))
    report = await manager.flush()
    assert sorted(report.processed) == ["deploy", "tax"]
    assert "segments: 9" not in raw.read_text()


@pytest.mark.parametrize("change", ["state", "selection", "cap"])
async def test_the_state_selection_or_cap_changing_means_a_full_check(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    root, manager = settled
    loads = _Loads(monkeypatch)
    if change == "cap":
        manager.config = manager.config.model_copy(update={"max_raw_memories_for_consolidation": 1})
    else:
        path = root / (PATHS.state_json if change == "state" else PATHS.selection_json)
        path.write_text(path.read_text() + " ")
    await manager.flush()
    assert loads.count == 1


async def test_retrying_failed_rollouts_is_a_full_check(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, manager = settled
    state_file = root / PATHS.state_json
    state = json.loads(state_file.read_text())
    state["rollouts"]["deploy"]["status"] = "failed"
    state_file.write_text(json.dumps(state))
    _age(root)
    assert _idle(await manager.flush())  # failed rollouts wait for retry_failed
    assert json.loads((root / PATHS.settled_json).read_text())["failed"] == 1
    loads = _Loads(monkeypatch)
    assert _idle(await manager.flush())
    assert loads.count == 0
    await manager.flush(retry_failed=True)
    assert loads.count == 1


async def test_files_too_new_to_trust_are_always_checked(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, manager = settled
    os.utime(root / PATHS.rollout_file("invoice"))  # touched now: same size, new mtime
    loads = _Loads(monkeypatch)
    assert _idle(await manager.flush())
    assert _idle(await manager.flush())
    assert loads.count == 2  # within two seconds nothing is certified


@pytest.mark.parametrize("edited", ["MEMORY.md", "skills/deploy/SKILL.md"])
async def test_a_memory_file_edited_by_hand_is_versioned(
    settled: tuple[Path, MemoryGenerationManager], monkeypatch: pytest.MonkeyPatch, edited: str
) -> None:
    # a settled flush skips the hand-edit check only while no memory file changed
    root, manager = settled
    path = root / PATHS.memories_dir / edited
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:  # in place
        f.write("\n- Deploys need the VPN.\n")
    os.utime(path, (PAST + 1, PAST + 1))
    for parent in path.relative_to(root / PATHS.memories_dir).parents:  # even when no
        os.utime(root / PATHS.memories_dir / parent, (PAST, PAST))  # directory looks touched
    loads = _Loads(monkeypatch)
    await manager.flush()
    assert loads.count == 1
    assert (await api.log(root))[0].kind == "hand_edit"
