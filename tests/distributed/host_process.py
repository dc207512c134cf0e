"""One "host": a process with its own workspace root that runs one agent run per rollout id
against a shared S3 memory with deferred generation, and prints each stop's duration.

    python host_process.py ROOT BUCKET PREFIX ENDPOINT BROKER ROLLOUT_ID...
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sandmem import Filesystem, Memory, RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
from sandmem.distributed import RedisScheduler, S3MemoryStore
from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.models import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, text, tool_call


def _agent(store: S3MemoryStore, broker: str, rollout: str) -> SandboxAgent:
    def respond(request: ModelRequest) -> list[dict[str, Any]]:
        if not any(item.get("type") == "function_call_output" for item in request.input):
            return [tool_call("exec_command", {"cmd": f"echo {rollout} > {rollout}.txt"})]
        return [text(f"Wrote {rollout}.txt for {rollout}.")]

    generate = MemoryGenerateConfig(
        phase_one_model="fake-memory",
        phase_one_model_settings=None,
        phase_two_model="fake-memory",
        phase_two_model_settings=None,
        schedule=RedisScheduler(broker, queue=os.environ["SANDMEM_TEST_QUEUE"]),
    )
    return SandboxAgent(
        name="host-agent",
        model=FunctionModel(respond),
        capabilities=[
            Memory(layout=MemoryLayoutConfig(store=store), generate=generate),
            Filesystem(),
            Shell(),
        ],
    )


async def main(
    root: Path, bucket: str, prefix: str, endpoint: str, broker: str, ids: list[str]
) -> None:
    store = S3MemoryStore(bucket, prefix, endpoint_url=endpoint)
    client = UnixLocalSandboxClient()
    for rollout in ids:
        session = await client.create(manifest=Manifest(root=root / rollout))
        await session.start()
        await Runner.run(
            _agent(store, broker, rollout),
            f"Record {rollout}.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
            conversation_id=rollout,
        )
        started = time.perf_counter()
        await session.stop()
        print(json.dumps({"rollout": rollout, "stop_s": time.perf_counter() - started}), flush=True)


if __name__ == "__main__":
    root, bucket, prefix, endpoint, broker, *ids = sys.argv[1:]
    asyncio.run(main(Path(root), bucket, prefix, endpoint, broker, ids))
