"""A separate process that records runs and generates memory on a shared workspace.

Used by the crash and concurrency tests: ``python memory_worker.py WORKSPACE NAME RUNS MODE``.
MODE ``normal`` generates memory at stop; ``slow-one`` makes each phase-one call sleep (so the
process can be killed during phase one); ``slow-two`` makes phase two write MEMORY.md and then
hang (so it can be killed mid-consolidation); ``slow-commit`` hangs in the middle of the
memory commit, after MEMORY.md was switched and before memory_summary.md. The worker prints
``recorded`` after its runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from memory_doubles import phase_one_model, phase_two_model

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs


def _models(mode: str) -> tuple[FunctionModel, FunctionModel]:
    one, two = phase_one_model(), phase_two_model()
    if mode == "slow-commit":
        two = phase_two_model(summary="Summary after the second conversation.")
    if mode == "slow-one":

        async def slow(request: ModelRequest) -> object:
            await asyncio.sleep(0.4)
            return one._fn(request)

        one = FunctionModel(slow)  # type: ignore[arg-type]
    if mode == "slow-two":

        async def hang(request: ModelRequest) -> object:
            if not tool_outputs(request):
                return [tool_call("write_file", {"path": "memories/MEMORY.md", "content": "half"})]
            print("consolidating", flush=True)
            await asyncio.sleep(60)
            return "never"

        two = FunctionModel(hang)  # type: ignore[arg-type]
    return one, two


def _pause_in_the_commit_switch(cls: type, workspace: Path) -> None:
    """Hang right after a memory commit switched MEMORY.md, before memory_summary.md."""
    original = cls.write_bytes

    async def write_bytes(self: object, path: str, data: bytes | str) -> None:
        await original(self, path, data)
        record = workspace / "memories/.phase_two_commit.json"
        if path == "memories/MEMORY.md" and record.exists():
            print("switching", flush=True)
            await asyncio.sleep(60)

    cls.write_bytes = write_bytes  # type: ignore[attr-defined]


async def main(workspace: str, name: str, runs: int, mode: str) -> None:
    one, two = _models(mode)
    config = MemoryGenerateConfig(phase_one_model=one, phase_two_model=two, phase_one_concurrency=1)
    agent = SandboxAgent(
        name=name,
        model=FunctionModel(lambda r: f"done by {name}"),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=Path(workspace)))
    if mode == "slow-commit":
        _pause_in_the_commit_switch(type(sandbox), Path(workspace))
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        for index in range(runs):
            await Runner.run(agent, f"{name} task {index}", run_config=run, conversation_id=name)
        print("recorded", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
