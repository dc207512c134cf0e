"""Issue 3, Done-when 5: a SandboxAgent whose model (through the real openai client and the
local fake server) calls exec_command and apply_patch changes the workspace and finishes."""

from __future__ import annotations

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem import (
    File,
    Manifest,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    UnixLocalSandboxClient,
    UserError,
)
from sandmem.models import OpenAIProvider

PATCH = """*** Begin Patch
*** Update File: app/config.py
@@
-DEBUG = True
+DEBUG = False
*** Add File: app/NOTES.md
+Debug mode is off in production.
*** End Patch
"""


def agent_handler(req: FakeRequest) -> FakeReply:
    outputs = req.tool_outputs()
    assert {"exec_command", "apply_patch", "view_image"} <= set(req.tool_names())
    if not outputs:
        return FakeReply(
            tool_calls=[("exec_command", {"cmd": "grep -n DEBUG app/config.py"}, "c1")]
        )
    if len(outputs) == 1:
        assert "1:DEBUG = True" in str(outputs["c1"])
        return FakeReply(tool_calls=[("apply_patch", {"patch": PATCH}, "c2")])
    if len(outputs) == 2:
        return FakeReply(
            tool_calls=[
                (
                    "exec_command",
                    {"cmd": "grep -c 'DEBUG = False' app/config.py"},
                    "c3",
                )
            ]
        )
    assert "Exit code: 0" in str(outputs["c3"])
    return FakeReply(text="Turned DEBUG off and documented it.")


MANIFEST = Manifest(
    entries={
        "app/__init__.py": File(content=b""),
        "app/config.py": File(content=b"DEBUG = True\nNAME = 'x'\n"),
    }
)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_sandbox_agent_edits_workspace_through_openai(
    fake_openai: FakeOpenAIServer, api: str
) -> None:
    fake_openai.handler = agent_handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test", api=api)  # type: ignore[arg-type]
    agent = SandboxAgent(name="fixer", model="fake-model")
    sandbox = await UnixLocalSandboxClient().create(manifest=MANIFEST)
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox), model_provider=provider)
        result = await Runner.run(agent, "Turn debug mode off.", run_config=run)
    assert result.final_output == "Turned DEBUG off and documented it."
    assert len(fake_openai.requests) == 4
    assert "sandbox workspace" in (fake_openai.requests[0].instructions or "")
    root = sandbox.root
    assert (root / "app/config.py").read_text() == "DEBUG = False\nNAME = 'x'\n"
    assert (root / "app/NOTES.md").read_text() == "Debug mode is off in production.\n"


async def test_run_creates_and_stops_its_own_session(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = agent_handler
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="test")
    agent = SandboxAgent(name="fixer", model="fake-model", default_manifest=MANIFEST)
    client = UnixLocalSandboxClient()
    run = RunConfig(sandbox=SandboxRunConfig(client=client), model_provider=provider)
    result = await Runner.run(agent, "Turn debug mode off.", run_config=run)
    assert result.final_output == "Turned DEBUG off and documented it."


async def test_sandbox_agent_without_sandbox_is_user_error() -> None:
    agent = SandboxAgent(name="x", model="m")
    with pytest.raises(UserError, match="needs a sandbox"):
        await Runner.run(agent, "hi")
