"""A read-only memory consumer: a checker agent with ``Memory(generate=None)``.

First an engineer fixes a bug with memory on (read + generate); stopping the session distils
the memory. Then, in a session resumed from the snapshot, a release checker reads that memory
but adds nothing to it: ``generate=None`` records no rollout, and
``MemoryReadConfig(live_update=False)`` tells it never to edit memory (so it needs only
``Shell()``, no ``Filesystem()``). Use this for sub-agents, checkers and one-off tool agents
whose runs carry little worth remembering.

    python examples/memory_read_only.py --offline
    python examples/memory_read_only.py --model gpt-5.4-mini
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from pathlib import Path

from _support import parse_args, scripted_checker, tree

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
from sandmem.demo import FIX_TASK, command_env, invoice_workspace, scripted_engineer

CHECK_TASK = (
    "Before the release, check that the invoice total fix recorded in memory is still in place "
    "and that the tests pass. Do not change anything."
)


def digest(root: Path, rel: str) -> str:
    """A fingerprint of every file under ``rel`` (to show that nothing changed)."""
    h = hashlib.sha256()
    for path in sorted((root / rel).rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()[:12]


def run_config(sandbox: SandboxSession) -> RunConfig:
    return RunConfig(sandbox=SandboxRunConfig(session=sandbox), workflow_name="read-only memory")


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    phases = "extractive" if args.offline else args.model
    generate = (
        MemoryGenerateConfig(phase_one_model=phases, phase_two_model=phases)
        if phases
        else MemoryGenerateConfig()
    )
    engineer = SandboxAgent(
        name="Engineer",
        model=scripted_engineer() if args.offline else args.model,
        capabilities=[Memory(generate=generate), Filesystem(), Shell()],
    )
    checker = SandboxAgent(
        name="Release checker",
        instructions="Verify; never modify the workspace.",
        model=scripted_checker() if args.offline else args.model,
        capabilities=[Memory(read=MemoryReadConfig(live_update=False), generate=None), Shell()],
    )

    client = UnixLocalSandboxClient(env=command_env())
    with tempfile.TemporaryDirectory(prefix="sandmem-example-") as snapshots:
        sandbox = await client.create(
            manifest=invoice_workspace(), snapshot=LocalSnapshotSpec(snapshots)
        )
        async with sandbox:
            fixed = await Runner.run(engineer, FIX_TASK, run_config=run_config(sandbox))
        print(f"Engineer: {fixed.final_output}\n")

        resumed = await client.resume(sandbox.state)
        root = resumed.root
        before = digest(root, "memories"), digest(root, "sessions")
        async with resumed:
            checked = await Runner.run(checker, CHECK_TASK, run_config=run_config(resumed))
        print(f"Checker: {checked.final_output}\n")
        after = digest(root, "memories"), digest(root, "sessions")

        print(tree(root, "sessions"))
        print(tree(root, "memories"))
        unchanged = "unchanged" if before == after else "CHANGED"
        print(f"\nMemory and rollouts after the checker's run: {unchanged} (generate=None)")
        if args.keep:
            shutil.copytree(root, Path(args.keep) / "workspace", symlinks=True)
        await client.delete(resumed)
        await client.delete(sandbox)


if __name__ == "__main__":
    asyncio.run(main())
