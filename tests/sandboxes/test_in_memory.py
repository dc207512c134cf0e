"""The in-memory sandbox double: the session API on a dict, and memory recorded and generated
on it end to end (everything above the primitives works on any backend)."""

from __future__ import annotations

import io

import pytest

from sandmem import (
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
)
from sandmem._errors import (
    SandboxError,
    SandboxPathError,
    UserError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from sandmem.capabilities import Filesystem, Shell
from sandmem.sandboxes import Dir, ExecResult, File, LocalFile, Manifest
from sandmem.testing import FunctionModel, InMemorySandboxClient


async def test_files_on_the_in_memory_session() -> None:
    client = InMemorySandboxClient()
    session = await client.create(
        manifest=Manifest(entries={"src": Dir(children={"a.py": File(content=b"A = 1\n")})})
    )
    async with session:
        assert (await session.read("src/a.py")).read() == b"A = 1\n"
        await session.write("notes/n.md", io.BytesIO(b"n"))
        await session.append("notes/n.md", "+")
        assert await session.read_bytes(f"{session.root}/notes/n.md") == b"n+"
        assert await session.listdir() == ["notes", "src"]
        (entry,) = await session.ls("src")
        assert entry.path == f"{session.root}/src/a.py" and entry.size == 6
        await session.rename("notes", "kept")
        assert await session.read_many(["kept/n.md", "gone.md"]) == {
            "kept/n.md": b"n+",
            "gone.md": None,
        }
        with pytest.raises(WorkspaceArchiveWriteError, match="not empty"):
            await session.rm("kept")
        await session.rm("kept", recursive=True)
        with pytest.raises(WorkspaceReadNotFoundError):
            await session.read("kept/n.md")
        with pytest.raises(SandboxPathError):
            await session.read("../x")
        async with session.lock("memories/.lock"):
            pass
    resumed = await client.resume(session.state)
    assert await resumed.read_bytes("src/a.py") == b"A = 1\n"
    await client.delete(resumed)
    with pytest.raises(UserError):
        await client.resume(session.state)


async def test_exec_goes_to_the_handler() -> None:
    seen: list[tuple[list[str], str]] = []

    def handler(argv: list[str], workdir: str, env: dict[str, str]) -> ExecResult | str:
        seen.append((argv, workdir))
        return "handled\n"

    session = await InMemorySandboxClient(exec_handler=handler).create()
    await session.mkdir("sub")
    result = await session.exec("echo", "hi", workdir="sub")
    assert result.stdout == b"handled\n"
    assert seen == [(["bash", "-c", "echo hi"], "sub")]
    quiet = await (await InMemorySandboxClient().create()).exec("true")
    assert quiet.exit_code == 127


async def test_host_entries_and_snapshots_are_refused(tmp_path: object) -> None:
    client = InMemorySandboxClient()
    with pytest.raises(UserError, match="LocalFile"):
        await client.create(manifest=Manifest(entries={"x": LocalFile(src="/etc/hostname")}))
    with pytest.raises(SandboxError):
        await (await client.create()).read_bytes("missing")


def _fixing_agent() -> SandboxAgent:
    def model(request: object) -> str:
        return "Fixed the invoice total: tax is a rate, so multiply. Run `pytest -q` to check."

    return SandboxAgent(
        name="fixer",
        model=FunctionModel(model),  # type: ignore[arg-type]
        capabilities=[
            Memory(
                generate=MemoryGenerateConfig(
                    phase_one_model="extractive", phase_two_model="extractive"
                )
            ),
            Filesystem(),
            Shell(),
        ],
    )


async def test_memory_is_recorded_and_generated_on_the_in_memory_backend() -> None:
    client = InMemorySandboxClient()
    session = await client.create()
    async with session:
        await Runner.run(
            _fixing_agent(),
            "Fix the invoice total bug",
            conversation_id="fix-1",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        )
    names = await session.listdir("memories")
    assert "MEMORY.md" in names and "memory_summary.md" in names
    assert await session.read_bytes("sessions/fix-1.jsonl")
    assert (await session.read_bytes("memories/memory_summary.md")).strip()
    await client.delete(session)
