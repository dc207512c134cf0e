"""``sandmem run``: one memory-enabled agent run on an existing directory, then memory
generation.

The answer is printed as soon as the run ends, before memory generation starts. Exit codes:
0 success; 1 the run failed or memory generation did not complete (the output says which and
how to retry); 2 a usage error (nothing was run); 130 interrupted (after saying what was saved).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from sandmem._errors import MemoryNotFoundError, ModelRequestError, SandmemError, UserError
from sandmem._items import Item, item_kind
from sandmem._log_lines import command_name
from sandmem.agent._capability import Capability
from sandmem.agent._run_config import RunConfig, SandboxRunConfig
from sandmem.capabilities._sandbox_agent import SandboxAgent
from sandmem.capabilities.filesystem import Filesystem
from sandmem.capabilities.memory import Memory
from sandmem.capabilities.shell import Shell
from sandmem.cli._common import (
    git_tip,
    layout_config,
    layout_options,
    open_workspace,
    review_option,
    rollout_file,
    run_async,
    sigint_to_main_thread,
    workspace_option,
)
from sandmem.cli._live import stream_run
from sandmem.cli._models import (
    OFFLINE_AGENT_HINT,
    SCRIPTED,
    ModelChoice,
    check_server,
    choose_models,
    client_options,
    server_model,
)
from sandmem.cli._output import Out, incomplete_text, progress_display, usage_dict
from sandmem.cli._scripted import scripted_model
from sandmem.cli._settings_file import ConfigError
from sandmem.memory import (
    GenerationReport,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    failure_kind,
    generate,
    new_rollout_id,
    rollout_items,
    show,
    validate_rollout_id,
)
from sandmem.models import Model
from sandmem.run._runner import RunResultStreaming
from sandmem.sandboxes import SandboxSession, _hostfs

__all__ = ["RolloutHistory", "paired_calls", "run_command"]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_MAX_TURNS = 30
EXIT_INTERRUPTED = 130


class RolloutHistory:
    """A conversation ``Session`` read back from the conversation's rollout file, so the
    history of ``--session ID`` lives in the workspace, redacted like every rollout. Storing is
    a no-op: the Memory capability appends each run to the rollout file."""

    def __init__(
        self, sandbox: SandboxSession, layout: MemoryLayoutConfig, rollout_id: str
    ) -> None:
        self.session_id = rollout_id
        self._sandbox = sandbox
        self._layout = layout

    async def get_items(self, limit: int | None = None) -> list[Item]:
        items = rollout_items(await recorded(self._sandbox, self._layout, self.session_id))
        items = paired_calls(items)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Item]) -> None:
        return None

    async def pop_item(self) -> Item | None:
        return None

    async def clear_session(self) -> None:
        return None


async def recorded(sandbox: SandboxSession, layout: MemoryLayoutConfig, rollout_id: str) -> str:
    """The conversation's rollout file ("" while it has none)."""
    try:
        return (await show(sandbox, "rollout", rollout_id, layout=layout)).text
    except MemoryNotFoundError:
        return ""


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
    models: ModelChoice
    rollout_id: str
    resume: bool
    layout: MemoryLayoutConfig
    read: bool
    generate: bool
    max_turns: int
    #: review mode: consolidations and the agent's memory edits become proposals
    review: bool = False


@dataclass
class RunState:
    """How far the command got; read after an interrupt to say what was saved."""

    stage: str = "starting"  # starting | running | memory | done
    recorded: bool = False
    result: RunResultStreaming | None = None
    error: SandmemError | None = None
    report: GenerationReport | None = None
    problems: list[str] = field(default_factory=list)
    #: why memory generation was skipped after the run (the server just failed)
    skipped: str | None = None


def after_run_config(opts: RunOptions) -> MemoryGenerateConfig:
    """The commands generate explicitly after the run (with progress and a report), so the
    session's stop must not generate as well: that would retry, within the same command, a
    conversation that just failed."""
    return opts.models.memory_config().model_copy(
        update={"schedule": "explicit", "review": opts.review}
    )


def build_agent(opts: RunOptions) -> SandboxAgent:
    capabilities: list[Capability] = [Filesystem(), Shell()]
    if opts.read or opts.generate:
        memory = Memory(
            layout=opts.layout,
            read=MemoryReadConfig(live_update="propose" if opts.review else True)
            if opts.read
            else None,
            generate=after_run_config(opts) if opts.generate else None,
        )
        capabilities.insert(0, memory)
    model: str | Model = scripted_model() if opts.models.agent == SCRIPTED else opts.models.agent
    return SandboxAgent(name="sandmem", model=model, capabilities=capabilities)


def server_failure(opts: RunOptions, error: BaseException | None) -> str | None:
    """Why memory generation would fail the same way right now: the run just failed on the
    model server (down, timing out, refusing the key or the model) and memory uses that server
    too. ``None``: generating is worth trying."""
    if error is None or opts.models.memory == "extractive":
        return None
    kind = failure_kind(error)
    if kind not in ("environment", "configuration") or not _from_server(error):
        return None
    status = getattr(_from_server(error), "status_code", None)
    return f"HTTP {status}" if status else "no answer"


def _from_server(error: BaseException) -> ModelRequestError | None:
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, ModelRequestError):
            return current
        current = current.__cause__
    return None


async def _segments(sandbox: SandboxSession, opts: RunOptions) -> int:
    return len((await recorded(sandbox, opts.layout, opts.rollout_id)).splitlines())


async def generate_memory(
    sandbox: SandboxSession, opts: RunOptions, out: Out
) -> GenerationReport | None:
    """Generate memory for the workspace's pending conversations, with progress; ``None``
    when there is no memory layout (the run stopped before recording anything)."""
    with progress_display(out.progress_console()) as progress:
        try:
            return await generate(
                sandbox,
                layout=opts.layout,
                config=after_run_config(opts),
                wait_backoff=True,
                progress=progress,
            )
        except MemoryNotFoundError:
            return None


async def execute(opts: RunOptions, state: RunState, out: Out) -> None:
    """Run the agent, print its answer, then generate memory (also after a failed run:
    failures are worth remembering). A run refused before its first model call
    (``UserError``) is re-raised at once."""
    sigint_to_main_thread()
    agent = build_agent(opts)
    async with open_workspace(opts.workspace) as sandbox:
        history = RolloutHistory(sandbox, opts.layout, opts.rollout_id) if opts.resume else None
        before = await _segments(sandbox, opts)
        state.stage = "running"
        view = out.live_view()
        try:
            state.result = await stream_run(
                view,
                agent,
                opts.prompt,
                session=history,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
                max_turns=opts.max_turns,
                conversation_id=opts.rollout_id,
            )
        except UserError:
            raise
        except SandmemError as exc:
            state.error = exc
        finally:
            state.recorded = opts.generate and await _segments(sandbox, opts) > before
        shown = state.result is not None and view.answer_shown(state.result.final_output)
        out.answer(result_event(opts, state), None if shown else state.result)
        if state.error is not None:  # the run's own cause comes first, before any memory line
            out.error(run_problem(opts, state))
        failure = server_failure(opts, state.error)
        if opts.generate and failure is not None:
            state.skipped = (
                f"memory generation skipped: the model server just failed the run ({failure}); "
                f"generate later with `{command_name()} memory generate -w {opts.workspace}`"
            )
            out.note(state.skipped)
        elif opts.generate:
            state.stage = "memory"
            state.report = await generate_memory(sandbox, opts, out)
            if state.report is not None:
                out.memory_report(state.report, opts.layout.memories_dir)
        state.stage = "done"


def interrupted_text(opts: RunOptions, state: RunState) -> str:
    """What an interrupt left behind, for people."""
    ws, rid = opts.workspace, opts.rollout_id
    rollout = rollout_file(opts.layout, rid)
    name = command_name()
    generate = f"`{name} memory generate -w {ws}` (or the next `{name} run` there)"
    if state.stage == "starting":
        return "interrupted before the run started; nothing was saved"
    if state.stage == "running":
        if not state.recorded:
            return "interrupted: the run was stopped; nothing was recorded"
        return (
            f"interrupted: the run was stopped and recorded in {ws}/{rollout} (as cancelled); "
            f"its memory is pending and is generated by {generate}; continue the conversation "
            f"with --session {rid}"
        )
    return (
        f"interrupted during memory generation: the run is recorded in {ws}/{rollout}; "
        "conversations not yet extracted stay pending and the previous memory is kept; "
        f"finish with {generate}"
    )


def run_problem(opts: RunOptions, state: RunState) -> str:
    """The run's error, for people (printed as soon as the run ends)."""
    if not state.recorded:
        where = " (nothing recorded: no model reply came)" if opts.generate else ""
    else:
        where = f" (recorded in {rollout_file(opts.layout, opts.rollout_id)})"
    return f"the run failed{where}: {state.error}"


def _problems(opts: RunOptions, state: RunState) -> list[str]:
    """What went wrong, after what was already printed: the run's error (printed when the
    run ended) is listed for ``--json`` and the exit status, not printed again."""
    problems = []
    if state.error is not None:
        problems.append(run_problem(opts, state))
    if state.report is not None:
        text = incomplete_text(state.report)
        if text:
            problems.append(
                f"memory generation did not complete: {text}; the run is recorded and its "
                f"memory stays pending: retry with `{command_name()} memory generate -w "
                f"{opts.workspace}`"
            )
    return problems


def result_event(opts: RunOptions, state: RunState) -> dict[str, Any]:
    result = state.result
    return {
        "type": "result",
        "rollout_id": opts.rollout_id,
        "final_output": None if result is None else result.final_output,
        "error": None if state.error is None else f"{type(state.error).__name__}: {state.error}",
        "usage": None if result is None else usage_dict(result.usage),
    }


def ready_models(models: ModelChoice) -> ModelChoice:
    """Check the model server answers (``ModelRequestError`` when not), then settle which
    model it serves when none was named (a configuration error, exit 2, when that is not
    clear); ``--model scripted`` needs no server."""
    if models.agent == SCRIPTED:
        return models
    try:
        check_server(hint=OFFLINE_AGENT_HINT)
        return server_model(models)
    except UserError as exc:
        raise ConfigError(str(exc)) from None


def _prompt_text(prompt: tuple[str, ...]) -> str:
    text = " ".join(prompt)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise click.UsageError("the prompt is empty")
    return text


def _rollout_id(session_id: str | None) -> str:
    if session_id is None:
        return new_rollout_id()
    try:
        return validate_rollout_id(session_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--session") from None


def agent_options(*, recorded: str, turns: str) -> Callable[[F], F]:
    """The memory and turn options ``run`` and ``chat`` share: ``--no-memory-read``,
    ``--no-memory-generate`` (``recorded`` names what is not recorded), ``--engine`` and
    ``--max-turns`` (``turns`` names what the limit applies to)."""

    def apply(fn: F) -> F:
        fn = click.option(
            "--max-turns",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_TURNS,
            show_default=True,
            help=f"Turn limit of {turns}.",
        )(fn)
        fn = click.option(
            "--engine",
            type=click.Choice(("model", "extractive")),
            default="model",
            show_default=True,
            help="Memory generation engine; 'extractive' needs no model.",
        )(fn)
        fn = click.option(
            "--no-memory-generate",
            is_flag=True,
            help=f"Do not record {recorded} or generate memory.",
        )(fn)
        fn = review_option(fn)
        return click.option(
            "--no-memory-read", is_flag=True, help="Do not show the agent existing memory."
        )(fn)

    return apply


@click.command("run")
@workspace_option(required=False)
@click.option(
    "--model",
    "-m",
    metavar="MODEL",
    help="The agent's model (default: $SANDMEM_MODEL, else gpt-5.4-mini; on a server that is "
    "not OpenAI's, the one model it lists); memory uses it too unless --memory-model or "
    "--engine extractive says otherwise. `scripted`: an offline deterministic agent (no "
    "server) that searches memory and lists the workspace; its runs are not recorded.",
)
@click.option(
    "--memory-model",
    metavar="MODEL",
    help="Model for both memory phases (default: $SANDMEM_MEMORY_MODEL, else the agent's "
    "model when chosen by --model/$SANDMEM_MODEL or when OPENAI_BASE_URL is not OpenAI, else "
    "gpt-5.4-mini and gpt-5.5).",
)
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    help="Conversation id: invocations with the same id continue one conversation (its "
    "history is replayed) and are remembered as one. Default: a new id per run.",
)
@layout_options
@agent_options(recorded="this run", turns="the agent run")
@click.option("--quiet", "-q", is_flag=True, help="Print only the answer and errors.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line.")
@client_options
@click.argument("prompt", nargs=-1, required=True)
@click.pass_context
def run_command(
    ctx: click.Context,
    workspace: Path,
    model: str | None,
    memory_model: str | None,
    session_id: str | None,
    memories_dir: str,
    sessions_dir: str,
    no_memory_read: bool,
    no_memory_generate: bool,
    engine: str,
    review: bool,
    max_turns: int,
    quiet: bool,
    as_json: bool,
    prompt: tuple[str, ...],
) -> None:
    """Run an agent with memory on a workspace directory.

    Prints the agent's final answer on stdout as soon as the run ends; then memory is
    generated. The agent gets a shell and apply_patch in the workspace (the local sandbox:
    commands run on this machine, NOT isolated), reads memory_summary.md, and the run is
    recorded. PROMPT is the task ('-' reads it from stdin).

    Needs OPENAI_API_KEY or OPENAI_BASE_URL (SANDMEM_OPENAI_API=chat_completions for
    servers without the Responses API), except with --model scripted (offline). Exit
    status: 0 done, 1 the run or memory generation failed, 2 usage error, 130
    interrupted. Reference: `sandmem docs cli`.
    """
    text = _prompt_text(prompt)
    workspace = workspace.absolute()  # the default is "."
    opts = RunOptions(
        workspace=workspace,
        prompt=text,
        models=choose_models(model, memory_model, engine, workspace),
        rollout_id=_rollout_id(session_id),
        resume=session_id is not None,
        layout=layout_config(memories_dir, sessions_dir),
        read=not no_memory_read,
        # the scripted agent's turns carry no knowledge: recording them would only put
        # junk into memory
        generate=not no_memory_generate and model != SCRIPTED,
        max_turns=max_turns,
        review=review,
    )
    out = Out(quiet=quiet, as_json=as_json)
    opts.models = ready_models(opts.models)
    fresh = not _hostfs.exists(workspace, opts.layout.memories_dir)
    out.start(opts.models, opts.rollout_id, workspace, memory=opts.generate)
    state = RunState()
    try:
        run_async(execute(opts, state, out))
    except KeyboardInterrupt:
        out.interrupted(interrupted_text(opts, state))
        ctx.exit(EXIT_INTERRUPTED)
    except asyncio.CancelledError:  # pragma: no cover - asyncio.run turns it into the above
        ctx.exit(EXIT_INTERRUPTED)
    if opts.generate and fresh and not quiet and not as_json:
        tip = git_tip(workspace, opts.layout)
        if tip:
            out.note(tip)
    if opts.generate and (state.recorded or opts.resume):
        rid = opts.rollout_id
        out.note(f"conversation: {rid} (continue it with --session {rid})")
    problems = _problems(opts, state)
    out.finish(problems)
    if problems:
        ctx.exit(1)
