"""Generation the application runs itself: ``MemoryGenerateConfig(schedule="explicit")`` (the
stop records and redacts, and generates nothing) and ``generate(wait_backoff=...)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from memory_doubles import scripted_agent

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, UserError
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory._store_seam import MemoryStore, MemoryVersion
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call

LAYOUT = MemoryLayoutConfig(memories_dir="agent/mem", sessions_dir="agent/rollouts")
EXPLICIT = MemoryGenerateConfig(
    phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE, schedule="explicit"
)
SECRET = "SG." + "a" * 22 + "." + "b" * 43  # a SendGrid key


def agent(generate: MemoryGenerateConfig, layout: MemoryLayoutConfig = LAYOUT) -> SandboxAgent:
    echo = f"echo 'key {SECRET}' >> {layout.memories_dir}/notes.md"
    return SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": echo})], lambda r: "done"
        ),
        capabilities=[Memory(layout=layout, generate=generate), Filesystem(), Shell()],
    )


async def run(session: SandboxSession, generate: MemoryGenerateConfig, rid: str) -> None:
    run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent(generate), f"task {rid}", run_config=run_config, conversation_id=rid)


async def test_the_stop_generates_nothing_and_still_redacts(tmp_path: Path) -> None:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        await run(session, EXPLICIT, "first")
    mem = tmp_path / LAYOUT.memories_dir
    [row] = await api.list_conversations(tmp_path, layout=LAYOUT)
    assert row.status == "pending" and row.attempts == 0
    assert not (mem / "raw_memories").exists() or not any((mem / "raw_memories").iterdir())
    assert (await api.status(tmp_path, layout=LAYOUT)).last_consolidation is None
    # the stop still redacted what the run wrote into memory
    notes = (mem / "notes.md").read_text()
    assert SECRET not in notes and "[REDACTED:sendgrid-key]" in notes

    # the application generates when it chooses, on a live session with the agents' config
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        await run(session, EXPLICIT, "second")
        report = await api.generate(session, layout=LAYOUT, config=EXPLICIT)
        assert report.processed == ["first", "second"] and report.complete
    # and that stop did not generate again: the log has one consolidation
    status = await api.status(tmp_path, layout=LAYOUT)
    assert status.counts.done == 2 and status.conversations == []
    assert status.tokens.phase_two.runs == 1


class _RemoteStore(MemoryStore):
    """A remote store the run must refuse before using it."""

    async def put_segment(
        self, sessions_dir: str, rollout_id: str, data: bytes, *, sequence: str | None = None
    ) -> str:
        raise AssertionError("never used")

    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        raise AssertionError("never used")

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        raise AssertionError("never used")

    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        raise AssertionError("never used")

    async def commit(
        self,
        memories_dir: str,
        base: MemoryVersion | None,
        files: dict[str, bytes],
        *,
        fence: int = 0,
    ) -> MemoryVersion:
        raise AssertionError("never used")


async def test_explicit_generation_is_refused_with_a_remote_store(tmp_path: Path) -> None:
    layout = MemoryLayoutConfig(store=_RemoteStore())
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
        with pytest.raises(UserError, match=r'schedule="explicit"\) generates in this workspace'):
            await Runner.run(agent(EXPLICIT, layout), "task", run_config=run_config)
    assert not (tmp_path / "sessions").exists()


def test_schedule_values() -> None:
    assert MemoryGenerateConfig().schedule == "inline"
    with pytest.raises(ValueError):
        MemoryGenerateConfig(schedule="later")  # type: ignore[arg-type]


def counting_refusal() -> tuple[FunctionModel, list[Any]]:
    calls: list[Any] = []

    def fn(request: ModelRequest) -> str:
        calls.append(request)
        raise ConnectionRefusedError("model server down")

    return FunctionModel(fn), calls


async def test_wait_backoff(tmp_path: Path) -> None:
    """After a server problem, ``wait_backoff=True`` (as a stop, ``sandmem run`` and ``chat``
    do) sends one probe for the waiting conversations; the default retries them all."""
    model, calls = counting_refusal()
    config = MemoryGenerateConfig(phase_one_model=model, phase_two_model=EXTRACTIVE)
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        await run(session, config, "first")
        await run(session, config, "second")
    assert len(calls) == 2  # the stop tried both: neither had failed before
    waiting = await api.status(tmp_path, layout=LAYOUT)
    assert all(c.next_retry_at is not None for c in waiting.conversations)

    probe = await api.generate(tmp_path, layout=LAYOUT, config=config, wait_backoff=True)
    assert len(calls) == 3  # one probe; the server is still down, so the other waits
    assert len(probe.failed) == 1 and len(probe.deferred) == 1 and not probe.complete
    assert probe.failure_kinds == dict.fromkeys(probe.failed, "environment")

    at_once = await api.generate(tmp_path, layout=LAYOUT, config=config)
    assert len(calls) == 5  # both, at once
    assert sorted(at_once.failed) == ["first", "second"] and at_once.deferred == []
    again = await api.status(tmp_path, layout=LAYOUT)
    assert [c.attempts for c in again.conversations] == [0, 0]  # no attempt used
