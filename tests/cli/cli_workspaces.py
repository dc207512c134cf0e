"""Workspaces with real memory for the CLI tests, and a fake-server handler that plays the
agent and both memory phases.

Workspaces are built with the library (a scripted ``FunctionModel`` agent with ``Memory``) on
a directory used in place (``Manifest(root=...)``); memory is generated when the session stops,
by the extractive engine or by the given models.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from fake_openai import FakeReply, FakeRequest

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.cli import cli
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call


@dataclass(frozen=True)
class Conversation:
    rollout_id: str
    prompt: str
    command: str
    answer: str


INVOICE = Conversation(
    "invoice-fix",
    "Fix the invoice total bug in app.py",
    "cat app.py",
    "Fixed the invoice total: the tax rate is now multiplied, not added.",
)
DEPLOY = Conversation(
    "deploy-notes",
    "Write deployment notes for the staging cluster",
    "ls",
    "Wrote deployment notes for the staging cluster.",
)

EXTRACTIVE_CONFIG = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


def agent_model(command: str, answer: str) -> FunctionModel:
    """Runs ``command`` once, then answers."""

    def fn(request: ModelRequest) -> Any:
        last_user = max(i for i, item in enumerate(request.input) if item.get("role") == "user")
        if any(i.get("type") == "function_call_output" for i in request.input[last_user:]):
            return answer
        return [tool_call("exec_command", {"cmd": command})]

    return FunctionModel(fn, name="scripted-agent")


def failing_phase_one(message: str = "phase one exploded") -> FunctionModel:
    def fn(request: ModelRequest) -> str:
        raise RuntimeError(message)

    return FunctionModel(fn, name="failing-phase-one")


async def _record(
    root: Path, conversations: list[Conversation], config: MemoryGenerateConfig
) -> None:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        for conv in conversations:
            agent = SandboxAgent(
                name="dev",
                model=agent_model(conv.command, conv.answer),
                capabilities=[Memory(generate=config), Filesystem(), Shell()],
            )
            await Runner.run(
                agent,
                conv.prompt,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
                conversation_id=conv.rollout_id,
            )


def build_workspace(
    root: Path,
    conversations: list[Conversation] | None = None,
    config: MemoryGenerateConfig = EXTRACTIVE_CONFIG,
) -> Path:
    """A workspace at ``root`` with the conversations recorded and memory generated."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text("def total(subtotal, rate):\n    return subtotal + rate\n")
    asyncio.run(_record(root, conversations or [INVOICE, DEPLOY], config))
    return root


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    """``sandmem ARGS`` in-process; stdout and stderr are captured separately."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def invoke_json(*args: str | Path, env: dict[str, str] | None = None) -> Any:
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


# ---------------------------------------------------------------- the fake server's part


def memory_server_handler(answer: str = "All done.") -> Any:
    """A handler for ``FakeOpenAIServer``: phase-one requests (structured output) get
    artifacts naming the rollout; consolidation runs (they offer ``write_file``) read
    ``raw_memories.md`` and write it into ``MEMORY.md``; every other request is the agent,
    answered with ``answer``."""

    def handler(req: FakeRequest) -> FakeReply:
        if req.wants_json():
            match = re.search(r"Rollout id: (\S+)", req.last_user_text())
            rid = match.group(1) if match else "unknown"
            return FakeReply.json(
                {
                    "rollout_slug": "task",
                    "rollout_summary": f"# Task of {rid}\nThe user asked for something.",
                    "raw_memory": f"- learned in conversation {rid}",
                }
            )
        if "write_file" in req.tool_names():
            outputs = req.tool_outputs()
            if not outputs:
                return FakeReply(
                    tool_calls=[("read_file", {"path": "memories/raw_memories.md"}, "read-1")]
                )
            if len(outputs) == 1:
                raw = str(outputs["read-1"])
                cited = dict.fromkeys(re.findall(r"rollout_summaries/[\w.-]+\.md", raw))
                raw += "\nSources: " + ", ".join(cited) + "\n"  # the citation verify reads
                return FakeReply(
                    tool_calls=[
                        ("write_file", {"path": "memories/MEMORY.md", "content": raw}, "w-1"),
                        (
                            "write_file",
                            {"path": "memories/memory_summary.md", "content": "Summary:\n" + raw},
                            "w-2",
                        ),
                    ]
                )
            return FakeReply(text="consolidated")
        return FakeReply(text=answer)

    return handler


def error_lines(stderr: str) -> list[str]:
    """The ``Error: `` lines a command printed."""
    return [line for line in stderr.splitlines() if line.startswith("Error: ")]


def pending_conversation(workspace: Path, rollout_id: str) -> None:
    """A recorded conversation whose memory is not generated yet."""
    segment = {
        "updated_at": "2026-12-01T10:00:00.000Z",
        "rollout_id": rollout_id,
        "input": [{"role": "user", "content": f"Fix the {rollout_id} bug in app.py"}],
        "generated_items": [
            {"role": "assistant", "content": [{"type": "output_text", "text": "Fixed it."}]}
        ],
        "final_output": "Fixed it.",
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
    }
    (workspace / "sessions").mkdir(exist_ok=True)
    (workspace / "sessions" / f"{rollout_id}.jsonl").write_text(json.dumps(segment) + "\n")
