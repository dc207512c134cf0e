"""A capability written against the reference SDK's base: fields as annotations, ``bind`` that
stores state and returns None, ``instructions(manifest)``, requirements named by type."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, UserError, function_tool
from sandmem.capabilities import Capability, Shell
from sandmem.models import ModelRequest
from sandmem.sandboxes import File, Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs


class NotesCapability(Capability):
    """Reference-style: a typed ``type`` field, fields with defaults, a pydantic Field."""

    type: Literal["notes"] = "notes"
    notes_file: str = "NOTES.md"
    tags: list[str] = Field(default_factory=list)

    def bind(self, session: SandboxSession) -> None:  # type: ignore[override]
        super().bind(session)
        self.bound_root = str(session.root)

    def required_capability_types(self) -> set[str]:  # type: ignore[override]
        return {"shell"}

    def tools(self) -> list:  # type: ignore[type-arg]
        @function_tool(name_override="read_notes")
        async def read_notes() -> str:
            """Read the notes file."""
            handle = await self.session.read(self.notes_file)
            return handle.read().decode()

        return [read_notes]

    async def instructions(self, manifest: Manifest) -> str | None:  # type: ignore[override]
        return f"Notes live in {self.notes_file} under {manifest.root}; tags: {self.tags}."


def test_fields_are_keyword_constructed() -> None:
    cap = NotesCapability(notes_file="TODO.md")
    assert (cap.type, cap.notes_file, cap.tags) == ("notes", "TODO.md", [])
    assert NotesCapability().tags is not NotesCapability().tags  # a fresh default each time
    with pytest.raises(TypeError, match="unexpected"):
        NotesCapability(colour="red")


def _reader(request: ModelRequest) -> list[dict[str, object]] | str:
    outputs = tool_outputs(request)
    if not outputs:
        return [tool_call("read_notes", {})]
    return str(outputs[-1]["output"])


async def test_a_reference_style_capability_works_in_a_run() -> None:
    client = UnixLocalSandboxClient()
    sandbox = await client.create(
        manifest=Manifest(entries={"TODO.md": File(content=b"- ship it\n")})
    )
    model = FunctionModel(_reader)
    cap = NotesCapability(notes_file="TODO.md", tags=["ops"])
    agent = SandboxAgent(name="notes", model=model, capabilities=[Shell(), cap])
    async with sandbox:
        result = await Runner.run(
            agent,
            "what is on the list?",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    await client.delete(sandbox)
    assert result.final_output == "- ship it\n"
    instructions = model.requests[0].instructions or ""
    assert f"Notes live in TODO.md under {sandbox.root}; tags: ['ops']." in instructions
    assert not hasattr(cap, "bound_root")  # the run bound a clone, not the agent's own object


async def test_requirements_named_by_type_are_checked() -> None:
    client = UnixLocalSandboxClient()
    sandbox = await client.create()
    agent = SandboxAgent(
        name="notes", model=FunctionModel(lambda r: "done"), capabilities=[NotesCapability()]
    )
    async with sandbox:
        with pytest.raises(UserError, match="shell"):
            await Runner.run(
                agent, "go", run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox))
            )
    await client.delete(sandbox)


async def test_memory_instructions_in_the_reference_form() -> None:
    from sandmem import Memory
    from sandmem._errors import CapabilityNotBoundError
    from sandmem.testing import InMemorySandboxClient

    memory = Memory(generate=None)
    with pytest.raises(ValueError, match="not bound to a SandboxSession") as info:
        await memory.instructions(Manifest())
    assert isinstance(info.value, CapabilityNotBoundError) and isinstance(info.value, UserError)
    session = await InMemorySandboxClient().create()
    async with session:
        memory.bind(session)
        assert await memory.instructions(session.state.manifest) is None  # no summary yet
        await session.mkdir("memories")
        await session.write("memories/memory_summary.md", b"")
        assert await memory.instructions(session.state.manifest) is None  # empty summary
        await session.write("memories/memory_summary.md", b"uses pytest -q")
        prompt = await memory.instructions(session.state.manifest)
        assert prompt is not None and "uses pytest -q" in prompt


def test_capability_accepts_its_type_name() -> None:
    class Notes(Capability):
        greeting: str = "hi"

    cap = Notes(type="notes", greeting="hello")
    assert (cap.type, cap.greeting) == ("notes", "hello")
    assert Capability(type="plain").type == "plain"
    with pytest.raises(TypeError, match="unexpected fields"):
        Notes(colour="red")
