"""The deferred stop's hand-over (``generation._stop.defer``): an error of the store that
"later may work" is tried again while ``stop_timeout_s`` lasts, a permanent one is not, and
past the bound the workspace keeps its pending record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandmem.memory._store_seam import GenerationScheduler, LocalMemoryStore, MemoryStoreError
from sandmem.memory.generation._stop import defer
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.sandboxes._session import SandboxSession

PATHS = MemoryPaths("memories", "sessions")
#: a guard that turns a hang into a failure (no speed is asserted)
HANG_GUARD_S = 60.0


class _Store(LocalMemoryStore):
    """A store whose pending mark fails with ``errors`` first, one a call."""

    def __init__(self, *errors: MemoryStoreError) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.marks = 0

    async def mark_pending(self, memories_dir: str, sessions_dir: str) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.marks += 1


class _Scheduler(GenerationScheduler):
    def __init__(self, stop_timeout_s: float, *errors: MemoryStoreError) -> None:
        self.stop_timeout_s = stop_timeout_s
        self.errors = list(errors)
        self.enqueued = 0

    async def enqueue(self, store: Any, paths: Any) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.enqueued += 1


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        yield session


def _record(tmp_path: Path) -> Path:
    return tmp_path / "ws/memories/.store/pending"


async def _defer(sandbox: SandboxSession, store: Any, scheduler: Any) -> bool:
    return await asyncio.wait_for(defer(sandbox, PATHS, store, scheduler), HANG_GUARD_S)


async def test_retryable_store_errors_are_tried_again_within_the_bound(
    sandbox: SandboxSession, tmp_path: Path
) -> None:
    store = _Store(MemoryStoreError("read timeout"), MemoryStoreError("503"))
    scheduler = _Scheduler(30.0)
    assert await _defer(sandbox, store, scheduler)
    assert (store.calls, store.marks, scheduler.enqueued) == (3, 1, 1)
    assert not _record(tmp_path).exists()


async def test_a_retry_after_a_later_step_failed_does_not_mark_again(
    sandbox: SandboxSession, tmp_path: Path
) -> None:
    store = _Store()
    scheduler = _Scheduler(30.0, MemoryStoreError("throttled"), MemoryStoreError("throttled"))
    assert await _defer(sandbox, store, scheduler)
    assert (store.marks, scheduler.enqueued) == (1, 1)
    assert not _record(tmp_path).exists()


async def test_a_permanent_store_error_is_not_tried_again(
    sandbox: SandboxSession, tmp_path: Path
) -> None:
    store = _Store(MemoryStoreError("access denied", retryable=False))
    scheduler = _Scheduler(30.0)
    assert not await _defer(sandbox, store, scheduler)
    assert (store.calls, scheduler.enqueued) == (1, 0)
    assert _record(tmp_path).exists()  # the next stop or run start tries again


async def test_errors_that_last_past_the_bound_leave_the_pending_record(
    sandbox: SandboxSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Store(*(MemoryStoreError(f"timeout {n}") for n in range(1000)))
    scheduler = _Scheduler(0.5)
    assert not await _defer(sandbox, store, scheduler)
    assert store.calls >= 1 and store.marks == 0 and scheduler.enqueued == 0
    assert _record(tmp_path).exists()
    assert "no answer within 0.5 s; last error" in caplog.text
