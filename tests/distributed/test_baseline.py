"""The consolidation baseline (``.consolidated_MEMORY.md``, ``MEMORY.md`` as last consolidated)
travels with the store's version: a worker's consolidation sees a live edit as an edit, the
model is told about it, and the extractive engine's ``MEMORY.md`` equals the local result."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from fake_openai import FakeOpenAIServer
from services import RedisServer, S3Server
from test_service_faults import EXTRACT, _memory_citing, _worker
from test_workers import MemoryModel

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.distributed import RedisScheduler, S3MemoryStore
from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.models import ModelRequest, OpenAIProvider
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, text, tool_call

LIVE = "- LIVE: use make bundle, never make all"
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


def _untimed(text: str) -> str:
    return _TIME.sub("<time>", text)


async def _conversation(
    root: Path, rollout: str, generate: MemoryGenerateConfig, store: Any = None, edit: bool = False
) -> None:
    """One run and its stop; with ``edit`` the run makes a live edit of ``MEMORY.md``."""
    memory_md = root / "memories/MEMORY.md"

    def respond(request: ModelRequest) -> list[dict[str, Any]]:
        if not any(item.get("type") == "function_call_output" for item in request.input):
            if edit:
                memory_md.write_text(memory_md.read_text() + f"\n{LIVE}\n")
            return [tool_call("exec_command", {"cmd": f"echo {rollout} > {rollout}.txt"})]
        return [text(f"Wrote {rollout}.txt for {rollout}: the build runs with make bundle.")]

    agent = SandboxAgent(
        name="baseline",
        model=FunctionModel(respond),
        capabilities=[
            Memory(layout=MemoryLayoutConfig(store=store), generate=generate),
            Filesystem(),
            Shell(),
        ],
    )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        await Runner.run(
            agent,
            f"Record {rollout}.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
            conversation_id=rollout,
        )


async def test_extractive_memory_after_a_live_edit_is_the_same_locally_and_on_a_worker(
    redis_server: RedisServer, s3_server: S3Server, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    await _conversation(local, "h9-r0", EXTRACT)
    await _conversation(local, "h9-r1", EXTRACT, edit=True)
    expected = (local / "memories/MEMORY.md").read_text()
    assert LIVE in expected

    prefix, queue = f"baseline-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    deferred = EXTRACT.model_copy(
        update={"schedule": RedisScheduler(redis_server.url, queue=queue)}
    )
    remote = tmp_path / "remote"
    async with _worker(redis_server.url, s3_server, prefix, queue):
        await _conversation(remote, "h9-r0", deferred, store)
        await _memory_citing(store, "h9-r0")
        await _conversation(remote, "h9-r1", deferred, store, edit=True)
        memory = await _memory_citing(store, "h9-r1")
    assert _untimed(memory) == _untimed(expected)
    assert memory.count(LIVE) == 1


def _consolidations(fake: FakeOpenAIServer) -> list[str]:
    """The phase-two requests so far (the first of each consolidation), as JSON text."""
    return [
        json.dumps(req.body)
        for req in fake.requests
        if "write_file" in req.tool_names() and not req.tool_outputs()
    ]


def _edit_block(request: str) -> str:
    """The diff a phase-two request shows under its live-edit heading."""
    return request.split(EDITED, 1)[1].split("```", 2)[1]


EDITED = "MEMORY.md was edited since the last consolidation"


async def test_a_workers_consolidation_tells_the_model_about_a_live_edit_as_a_local_one_does(
    redis_server: RedisServer, s3_server: S3Server, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    model = MemoryModel()
    fake_openai.handler = model
    provider = OpenAIProvider(api_key="test", base_url=fake_openai.base_url, api="chat_completions")
    config = MemoryGenerateConfig(
        phase_one_model="fake-memory",
        phase_one_model_settings=None,
        phase_two_model="fake-memory",
        phase_two_model_settings=None,
        model_provider=provider,
    )
    prefix, queue = f"baseline-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    store = S3MemoryStore(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    deferred = EXTRACT.model_copy(
        update={"schedule": RedisScheduler(redis_server.url, queue=queue)}
    )
    try:
        # locally: the stop consolidates in the workspace
        await _conversation(tmp_path / "local", "h8-r0", config)
        await _conversation(tmp_path / "local", "h8-r1", config, edit=True)
        local = _consolidations(fake_openai)
        fake_openai.requests.clear()
        # the same sequence with a store and a worker
        root = tmp_path / "ws"
        async with _worker(redis_server.url, s3_server, prefix, queue, config=config):
            await _conversation(root, "h8-r0", deferred, store)
            await _memory_citing(store, "h8-r0")
            await _conversation(root, "h8-r1", deferred, store, edit=True)
            await _memory_citing(store, "h8-r1")
    finally:
        await provider.aclose()
    worker = _consolidations(fake_openai)
    assert len(local) == len(worker) == 2
    assert EDITED not in worker[0] and EDITED in worker[1]
    assert f"+{LIVE}" in _edit_block(worker[1])  # the edit, as an added line of the diff
    assert _edit_block(worker[1]) == _edit_block(local[1])
    assert _untimed(worker[1]) == _untimed(local[1])
