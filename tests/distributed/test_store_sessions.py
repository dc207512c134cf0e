"""Sessions on different "hosts" (own workspace roots) sharing one memory in S3, with inline
generation: rollouts pushed as segments, memory generated in the store, pulled by the next
host; live edits merged, never lost."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from services import S3Server

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.distributed import S3MemoryStore
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.models import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, text, tool_call

_EXTRACTIVE = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


def _agent(store: S3MemoryStore, seen: list[str], command: str) -> SandboxAgent:
    def respond(request: ModelRequest) -> list[dict[str, Any]]:
        seen.append(request.instructions or "")
        if not any(item.get("type") == "function_call_output" for item in request.input):
            return [tool_call("exec_command", {"cmd": command})]
        return [text(f"Done: `{command}` worked.")]

    layout = MemoryLayoutConfig(store=store)
    return SandboxAgent(
        name="worker",
        model=FunctionModel(respond),
        capabilities=[Memory(layout=layout, generate=_EXTRACTIVE), Filesystem(), Shell()],
    )


async def _host_run(root: Path, store: S3MemoryStore, rollout: str, command: str) -> list[str]:
    seen: list[str] = []
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=root))
    async with session:
        await Runner.run(
            _agent(store, seen, command),
            f"Please run the build ({rollout}).",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
            conversation_id=rollout,
        )
    return seen


def _store(s3: S3Server) -> S3MemoryStore:
    return S3MemoryStore(s3.bucket, f"hosts-{uuid.uuid4().hex[:8]}", endpoint_url=s3.endpoint_url)


async def test_a_second_host_reads_what_the_first_host_learned(
    s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(s3_server)
    first = await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo built > out.txt")
    assert "Memory from earlier runs" not in first[0]
    segments = await store.segments("sessions")
    assert list(segments) == ["host-a-r1"] and len(segments["host-a-r1"]) == 1
    current = await store.current("memories")
    assert current is not None
    assert {"MEMORY.md", "memory_summary.md", "raw_memories/host-a-r1.md"} <= set(current.files)

    second = await _host_run(tmp_path / "host-b", store, "host-b-r1", "echo again > out.txt")
    assert "Memory from earlier runs" in second[0]  # host B pulled host A's summary
    assert "host-a-r1" in (tmp_path / "host-b/memories/MEMORY.md").read_text()
    current = await store.current("memories")
    assert current is not None
    memory = (await store.read_files("memories", current, ["MEMORY.md"]))["MEMORY.md"].decode()
    assert "host-a-r1" in memory and "host-b-r1" in memory


async def test_a_live_edit_racing_another_commit_keeps_both(
    s3_server: S3Server, tmp_path: Path
) -> None:
    from sandmem.memory.layout import MemoryPaths
    from sandmem.memory.store._sync import pull, push_edits

    store = _store(s3_server)
    await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo built > out.txt")
    paths = MemoryPaths("memories", "sessions")
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "host-b"))
    async with session:
        assert await pull(session, paths, store)
        edited = (tmp_path / "host-b/memories/MEMORY.md").read_text()
        (tmp_path / "host-b/memories/MEMORY.md").write_text(edited + "\n- LIVE: use make bundle\n")
        # meanwhile another writer (a worker) commits a new MEMORY.md
        current = await store.current("memories")
        assert current is not None
        files = await store.read_files("memories", current, list(current.files))
        files["MEMORY.md"] = b"# Worker rewrite\n\n- WORKER: consolidated\n" + files["MEMORY.md"]
        await store.commit("memories", current, files)
        assert await push_edits(session, paths, store)
    final = await store.current("memories")
    assert final is not None
    memory = (await store.read_files("memories", final, ["MEMORY.md"]))["MEMORY.md"].decode()
    assert "LIVE: use make bundle" in memory and "WORKER: consolidated" in memory
