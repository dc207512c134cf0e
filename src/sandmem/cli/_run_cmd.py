"""``sandmem run``: one memory-enabled agent run on an existing directory, then memory
generation."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sandmem._errors import SandmemError, UserError
from sandmem._items import Item, item_kind
from sandmem._run import Runner, RunResult
from sandmem._run_config import RunConfig, SandboxRunConfig
from sandmem._sandbox_agent import SandboxAgent
from sandmem.capabilities._base import Capability
from sandmem.capabilities.filesystem import Filesystem
from sandmem.capabilities.memory import Memory
from sandmem.capabilities.shell import Shell
from sandmem.cli._common import (
    command_manager,
    generate_config,
    layout_options,
    layout_paths,
    open_workspace,
    require_model_server,
    run_async,
    workspace_option,
)
from sandmem.cli._output import (
    emit_json,
    flush_with_progress,
    report_dict,
    report_lines,
    stderr_console,
    usage_dict,
)
from sandmem.memory.config import MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.maintenance import checked_rollout_id
from sandmem.memory.manager import FlushReport
from sandmem.memory.rollouts import new_rollout_id
from sandmem.memory.storage import MemoryPaths, read_text
from sandmem.sandboxes import SandboxSession

DEFAULT_MAX_TURNS = 30


class RolloutHistory:
    """A conversation ``Session`` read back from the conversation's rollout file, so the
    history of ``--session ID`` lives in the workspace, redacted like every rollout. Storing is
    a no-op: the Memory capability appends each run to the rollout file."""

    def __init__(self, sandbox: SandboxSession, paths: MemoryPaths, rollout_id: str) -> None:
        self.session_id = rollout_id
        self._sandbox = sandbox
        self._path = paths.rollout_file(rollout_id)

    async def get_items(self, limit: int | None = None) -> list[Item]:
        text = await read_text(self._sandbox, self._path) or ""
        items: list[Item] = []
        for line in text.splitlines():
            try:
                segment = json.loads(line)
            except ValueError:
                continue
            if isinstance(segment, dict):
                for key in ("input", "generated_items"):
                    value = segment.get(key)
                    items.extend(i for i in value or [] if isinstance(i, dict))
        items = paired_calls(items)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Item]) -> None:
        return None

    async def pop_item(self) -> Item | None:
        return None

    async def clear_session(self) -> None:
        return None


def paired_calls(items: list[Item]) -> list[Item]:
    """Drop tool calls without an output and outputs without a call (a run that was cut
    short), which model APIs refuse."""
    calls = {i.get("call_id") for i in items if item_kind(i) == "function_call"}
    outputs = {i.get("call_id") for i in items if item_kind(i) == "function_call_output"}
    return [
        i
        for i in items
        if (item_kind(i) != "function_call" or i.get("call_id") in outputs)
        and (item_kind(i) != "function_call_output" or i.get("call_id") in calls)
    ]


@dataclass
class RunOptions:
    workspace: Path
    prompt: str
    model: str | None
    session_id: str | None
    paths: MemoryPaths
    read: bool
    generate: bool
    engine: str
    max_turns: int


@dataclass
class RunOutcome:
    rollout_id: str
    result: RunResult | None = None
    error: SandmemError | None = None
    report: FlushReport | None = None


def build_agent(opts: RunOptions) -> SandboxAgent:
    capabilities: list[Capability] = [Filesystem(), Shell()]
    if opts.read or opts.generate:
        layout = MemoryLayoutConfig(
            memories_dir=opts.paths.memories_dir, sessions_dir=opts.paths.sessions_dir
        )
        memory = Memory(
            layout=layout,
            read=MemoryReadConfig() if opts.read else None,
            generate=generate_config(opts.engine, opts.model, agent_model=True)
            if opts.generate
            else None,
        )
        capabilities.insert(0, memory)
    return SandboxAgent(name="sandmem", model=opts.model, capabilities=capabilities)


async def execute(opts: RunOptions) -> RunOutcome:
    """Run the agent, then generate memory (also after a failed run: failures are worth
    remembering). A run refused before its first model call (``UserError``) is re-raised
    at once; any other run error after memory generation."""
    require_model_server()
    agent = build_agent(opts)
    memory = next((c for c in agent.capabilities if isinstance(c, Memory)), None)
    rid = checked_rollout_id(opts.session_id) if opts.session_id else new_rollout_id()
    outcome = RunOutcome(rid)
    console = stderr_console()
    async with open_workspace(opts.workspace) as sandbox:
        manager = None
        if memory is not None and memory.generate is not None:
            manager = command_manager(sandbox, opts.paths, memory.generate)
        history = RolloutHistory(sandbox, opts.paths, rid) if opts.session_id else None
        try:
            outcome.result = await Runner.run(
                agent,
                opts.prompt,
                session=history,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
                max_turns=opts.max_turns,
                conversation_id=rid,
            )
        except UserError:
            raise
        except SandmemError as exc:
            outcome.error = exc
        if manager is not None:
            outcome.report = await flush_with_progress(manager, console)
    return outcome


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    result = outcome.result
    return {
        "rollout_id": outcome.rollout_id,
        "final_output": None if result is None else result.final_output,
        "error": None
        if outcome.error is None
        else f"{type(outcome.error).__name__}: {outcome.error}",
        "usage": None if result is None else usage_dict(result.usage),
        "memory": None if outcome.report is None else report_dict(outcome.report),
    }


@click.command("run")
@workspace_option(required=True)
@click.option(
    "--model",
    "-m",
    metavar="MODEL",
    help="Model name for the agent (and the memory phases unless --engine extractive); "
    "default: $SANDMEM_MODEL or gpt-5.4-mini.",
)
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    help="Conversation id: invocations with the same id continue one conversation (its "
    "history is replayed) and are remembered as one. Default: a new id per run.",
)
@layout_options
@click.option("--no-memory-read", is_flag=True, help="Do not show the agent existing memory.")
@click.option(
    "--no-memory-generate", is_flag=True, help="Do not record this run or generate memory."
)
@click.option(
    "--engine",
    type=click.Choice(("model", "extractive")),
    default="model",
    show_default=True,
    help="Memory generation engine; 'extractive' needs no model.",
)
@click.option(
    "--max-turns",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_TURNS,
    show_default=True,
    help="Turn limit of the agent run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.argument("prompt", nargs=-1, required=True)
def run_command(
    workspace: Path,
    model: str | None,
    session_id: str | None,
    memories_dir: str,
    sessions_dir: str,
    no_memory_read: bool,
    no_memory_generate: bool,
    engine: str,
    max_turns: int,
    as_json: bool,
    prompt: tuple[str, ...],
) -> None:
    """Run an agent with memory on a workspace directory.

    Prints the agent's final answer on stdout. The agent gets a shell and apply_patch in
    the workspace (the local sandbox: commands run on this machine, NOT isolated), reads
    memory_summary.md, and records the run; when it ends, memory is generated. PROMPT is
    the task ('-' reads it from stdin).

    Needs OPENAI_API_KEY or OPENAI_BASE_URL (SANDMEM_OPENAI_API=chat_completions for
    servers without the Responses API).
    """
    text = " ".join(prompt)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise click.UsageError("the prompt is empty")
    opts = RunOptions(
        workspace=workspace,
        prompt=text,
        model=model,
        session_id=session_id,
        paths=layout_paths(memories_dir, sessions_dir),
        read=not no_memory_read,
        generate=not no_memory_generate,
        engine=engine,
        max_turns=max_turns,
    )
    outcome = run_async(execute(opts))
    if as_json:
        emit_json(outcome_dict(outcome))
    elif outcome.result is not None:
        click.echo(str(outcome.result.final_output))
    if not as_json and outcome.report is not None:
        click.echo(f"memory ({opts.paths.memories_dir}/):", err=True)
        for line in report_lines(outcome.report):
            click.echo(line, err=True)
    if opts.generate and not as_json:
        rid = outcome.rollout_id
        click.echo(f"conversation: {rid} (continue it with --session {rid})", err=True)
    if outcome.error is not None:
        raise outcome.error
