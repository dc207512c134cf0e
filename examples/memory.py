"""Memory across two runs, as library code.

Run 1 fixes a bug in a fresh sandbox. Leaving ``async with sandbox`` stops the session: memory
is generated from the run (phase one, then phase two) and the workspace is snapshotted. A new
session resumed from the snapshot then gets a follow-up that names neither the bug nor the
file: "Add a regression test for the bug you fixed." Memory supplies the context.

    python examples/memory.py --offline            # scripted agent + extractive engine
    python examples/memory.py --model gpt-5.4-mini # or set OPENAI_API_KEY / OPENAI_BASE_URL

Tuning notes: ``MemoryReadConfig(live_update=False)`` saves the time an agent spends fixing a
stale memory entry during a run (stale entries then wait for the next consolidation);
``extra_prompt`` should stay short, a few focused bullets.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from _support import parse_args, tree

from sandmem import (
    Filesystem,
    LocalSnapshotSpec,
    Memory,
    MemoryGenerateConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    SandboxSession,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem.demo import (
    FIX_TASK,
    REGRESSION_TASK,
    command_env,
    invoice_workspace,
    scripted_engineer,
)


def build_agent(offline: bool, model: str | None) -> SandboxAgent:
    # extra guidance for both memory phases: keep it short, a few focused points
    extra = "Note which files a fix touched and which command runs the tests."
    if offline:
        generate = MemoryGenerateConfig(
            phase_one_model="extractive", phase_two_model="extractive", extra_prompt=extra
        )
    elif model:
        generate = MemoryGenerateConfig(
            phase_one_model=model, phase_two_model=model, extra_prompt=extra
        )
    else:  # the defaults: gpt-5.4-mini for phase one, gpt-5.5 for phase two
        generate = MemoryGenerateConfig(extra_prompt=extra)
    return SandboxAgent(
        name="Memory-enabled engineer",
        instructions="Inspect the workspace, make small tested changes, and keep useful lessons.",
        model=scripted_engineer() if offline else model,
        capabilities=[
            # read: memory_summary.md goes into every run's instructions; live_update lets the
            # agent correct a stale MEMORY.md entry. generate: each run is recorded, and memory
            # is distilled when the sandbox session stops.
            Memory(read=MemoryReadConfig(live_update=True), generate=generate),
            Filesystem(),
            Shell(),
        ],
    )


def run_config(sandbox: SandboxSession) -> RunConfig:
    return RunConfig(sandbox=SandboxRunConfig(session=sandbox), workflow_name="memory example")


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    agent = build_agent(args.offline, args.model)
    # commands in the workspace find the Python (and pytest) that runs this example
    client = UnixLocalSandboxClient(env=command_env())
    with tempfile.TemporaryDirectory(prefix="sandmem-example-") as snapshots:
        sandbox = await client.create(
            manifest=invoice_workspace(), snapshot=LocalSnapshotSpec(snapshots)
        )
        async with sandbox:
            first = await Runner.run(agent, FIX_TASK, run_config=run_config(sandbox), max_turns=30)
        print(f"Run 1: {FIX_TASK}\n{first.final_output}\n")

        # a new session restored from the snapshot: run 2 depends on the memory on disk, not
        # on anything held in this process
        resumed = await client.resume(sandbox.state)
        async with resumed:
            second = await Runner.run(
                agent, REGRESSION_TASK, run_config=run_config(resumed), max_turns=30
            )
        print(f"Run 2: {REGRESSION_TASK}\n{second.final_output}\n")

        root = resumed.root
        print(tree(root, "sessions"))
        print(tree(root, "memories"))
        print("\nmemories/memory_summary.md:")
        print((root / "memories/memory_summary.md").read_text())
        if args.keep:
            shutil.copytree(root, Path(args.keep) / "workspace", symlinks=True)
        await client.delete(resumed)
        await client.delete(sandbox)


if __name__ == "__main__":
    asyncio.run(main())
