"""``sandmem chat``: an interactive multi-turn conversation with a memory-enabled agent.

Each line you type is one turn (a streamed run, shown like ``sandmem run``). The history is
a ``SQLiteSession`` kept in the workspace (``.sandmem/chat.db``), so ``--resume`` continues
the last chat; every turn is recorded as a segment of the chat's rollout, and memory is
generated once, when the chat ends (``/exit`` or Ctrl-D). Ctrl-C cancels the current turn
(recorded as cancelled), not the chat; at the prompt it clears the line. On a terminal the
prompt has line editing and history (the standard library's ``readline``; Up recalls earlier
lines, also of earlier chats: ``.sandmem/chat_history``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click

from sandmem._errors import SandmemError, UserError
from sandmem._log_lines import command_name
from sandmem._usage import Usage
from sandmem.agent._run_config import RunConfig, SandboxRunConfig
from sandmem.agent._session import SQLiteSession
from sandmem.cli._common import (
    git_tip,
    layout_config,
    layout_options,
    rollout_file,
    sigint_to_main_thread,
    workspace_option,
)
from sandmem.cli._live import stream_run
from sandmem.cli._models import SCRIPTED, choose_models, client_options
from sandmem.cli._output import Out, incomplete_text
from sandmem.cli._run_cmd import (
    EXIT_INTERRUPTED,
    RunOptions,
    agent_options,
    build_agent,
    generate_memory,
    ready_models,
    server_failure,
)
from sandmem.memory import show, status, validate_rollout_id
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient, _hostfs

#: where chats keep their history, relative to the workspace
CHAT_DIR = ".sandmem"
PROMPT = "you> "
HELP = (
    "/memory shows memory_summary.md · /status shows this chat and the memory · /exit (or "
    "Ctrl-D) ends the chat and generates memory · Ctrl-C cancels the current turn; at the "
    "prompt it ends the chat without generating memory"
)


@dataclass
class Chat:
    opts: RunOptions
    out: Out
    sandbox: SandboxSession
    history: SQLiteSession
    turns: int = 0
    cancelled: int = 0
    usage: Usage = field(default_factory=Usage)
    problems: list[str] = field(default_factory=list)
    #: the last turn's error when the model server caused it (memory would fail the same way)
    server_failed: str | None = None


def _new_chat_id() -> str:
    return f"chat-{uuid.uuid4().hex[:16]}"


def _chat_id(workspace: Path, session_id: str | None, resume: bool) -> tuple[str, bool]:
    """(the chat's id, whether it continues an earlier chat)."""
    last = f"{CHAT_DIR}/last_chat"
    if session_id is not None:
        try:
            return validate_rollout_id(session_id), True
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--session") from None
    if resume:
        text = _hostfs.read(workspace, last).decode() if _hostfs.is_file(workspace, last) else ""
        if not text.strip():
            raise click.UsageError(f"no earlier chat in {workspace} to resume; drop --resume")
        return text.strip(), True
    return _new_chat_id(), False


async def _turn(chat: Chat, text: str) -> None:
    agent = build_agent(chat.opts)
    view = chat.out.live_view()
    try:
        result = await stream_run(
            view,
            agent,
            text,
            session=chat.history,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=chat.sandbox)),
            max_turns=chat.opts.max_turns,
            conversation_id=chat.opts.rollout_id,
        )
    except UserError:
        raise
    except SandmemError as exc:
        click.echo(f"Error: this turn failed: {exc}", err=True)
        chat.server_failed = server_failure(chat.opts, exc)
        return
    finally:
        chat.turns += 1
    chat.server_failed = None
    chat.usage.add(result.usage)
    if not view.answer_shown(result.final_output):
        click.echo(str(result.final_output))


async def _show_memory(chat: Chat) -> None:
    try:
        found = await show(chat.sandbox, "summary", layout=chat.opts.layout)
    except UserError:
        click.echo("no memory in this workspace yet", err=True)
        return
    if not found.exists or found.empty:
        click.echo(f"{found.path}: no memory generated yet", err=True)
        return
    click.echo(found.text.rstrip("\n"))


async def _show_status(chat: Chat) -> None:
    opts = chat.opts
    tokens = (
        "no tokens (the scripted agent is not a model)"
        if opts.models.agent == SCRIPTED
        else f"{chat.usage.input_tokens:,} tokens in / {chat.usage.output_tokens:,} out"
    )
    click.echo(
        f"chat {opts.rollout_id}: {chat.turns} turn(s) this session ({chat.cancelled} "
        f"cancelled), {tokens}, workspace {opts.workspace}"
    )
    click.echo(f"models: {opts.models.describe(memory=opts.generate)}")
    when = (
        "generated when the chat ends"
        if chat.turns and opts.generate
        else "generated when the chat ends, once it has had a turn"
        if opts.generate
        else "not generated by this chat (the scripted agent's turns are not recorded)"
        if opts.models.agent == SCRIPTED
        else "not generated by this chat (--no-memory-generate)"
    )
    try:
        info = await status(chat.sandbox, layout=chat.opts.layout)
    except UserError:
        click.echo(f"memory: none yet ({when})")
        return
    counts = info.counts
    click.echo(
        f"memory: {counts.total} conversation(s), {counts.done} done, {counts.pending} "
        f"pending, {counts.failed} failed (pending ones are {when})"
    )


async def _command(chat: Chat, line: str) -> bool:
    """Run a ``/command``; ``False`` ends the chat."""
    name = line.split()[0].lower()
    if name in ("/exit", "/quit"):
        return False
    if name == "/memory":
        await _show_memory(chat)
    elif name == "/status":
        await _show_status(chat)
    else:
        click.echo(HELP, err=True)
    return True


def line_editing(chat_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Line editing and history for ``input()`` while the chat runs, on a terminal: the
    standard library's ``readline`` (absent on some platforms: then plain input). The history
    is read from and saved to ``chat_dir/chat_history``."""
    if not sys.stdin.isatty():
        return contextlib.nullcontext()
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows without pyreadline
        return contextlib.nullcontext()
    path = chat_dir / "chat_history"

    @contextlib.contextmanager
    def editing() -> Iterator[None]:
        readline.set_history_length(1000)
        with contextlib.suppress(OSError):
            readline.read_history_file(path)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                readline.write_history_file(path)

    return editing()


def _converse(runner: asyncio.Runner, chat: Chat) -> None:
    """Read lines until /exit or end of input; Ctrl-C cancels a turn, and at the prompt ends
    the chat (``_EndedByCtrlC``)."""
    with line_editing(chat.opts.workspace / CHAT_DIR):
        _read_lines(runner, chat)


def _read_lines(runner: asyncio.Runner, chat: Chat) -> None:
    while True:
        try:
            line = input(PROMPT).strip()
        except EOFError:
            click.echo("")
            return
        except KeyboardInterrupt:
            raise _EndedByCtrlC from None
        if not line:
            continue
        if line.startswith("/"):
            if not runner.run(_command(chat, line)):
                return
            continue
        try:
            runner.run(_turn(chat, line))
        except KeyboardInterrupt:
            chat.cancelled += 1
            click.echo(
                "\n(turn cancelled: recorded as cancelled once the model had replied, else not "
                "at all. Ask again, or /exit)",
                err=True,
            )


async def _open(opts: RunOptions, out: Out) -> Chat:
    sigint_to_main_thread()
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=opts.workspace))
    await sandbox.start()
    await sandbox.write(f"{CHAT_DIR}/last_chat", (opts.rollout_id + "\n").encode())
    # the history database is opened by SQLite; its directory was made through the session
    history = SQLiteSession(opts.rollout_id, db_path=opts.workspace / CHAT_DIR / "chat.db")
    return Chat(opts, out, sandbox, history)


async def _generate(chat: Chat) -> None:
    opts = chat.opts
    if not opts.generate:
        return
    if chat.server_failed is not None:
        click.echo(
            f"chat ended; memory generation skipped: the model server just failed "
            f"({chat.server_failed}); generate later with `{command_name()} memory generate "
            f"-w {opts.workspace}`",
            err=True,
        )
        return
    click.echo("chat ended; generating memory", err=True)
    report = await generate_memory(chat.sandbox, opts, chat.out)
    if report is None:
        return
    chat.out.memory_report(report, opts.layout.memories_dir)
    text = incomplete_text(report)
    if text:
        chat.problems.append(
            f"memory generation did not complete: {text}; the chat is recorded and its memory "
            f"stays pending: retry with `{command_name()} memory generate -w {opts.workspace}`"
        )


class _EndedByCtrlC(Exception):
    """Ctrl-C at the prompt: the chat ends at once, without generating memory."""


def _ended_text(chat: Chat) -> str:
    opts = chat.opts
    where = f"{opts.workspace}/{rollout_file(opts.layout, opts.rollout_id)}"
    if not chat.turns:
        return "chat ended (Ctrl-C): no turn, nothing was recorded"
    if not opts.generate:
        return f"chat ended (Ctrl-C): {chat.turns} turn(s), not recorded; continue with --resume"
    return (
        f"chat ended (Ctrl-C): its {chat.turns} turn(s) are recorded in {where}; memory was not "
        f"generated now: `{command_name()} memory generate -w {opts.workspace}` (or the end of "
        "the next chat) does it; continue the chat with --resume"
    )


def _saved_text(chat: Chat) -> str:
    opts = chat.opts
    return (
        f"interrupted during memory generation: the chat is recorded in "
        f"{opts.workspace}/{rollout_file(opts.layout, opts.rollout_id)}; conversations not yet "
        "extracted stay pending and the previous memory is kept; finish with "
        f"`{command_name()} memory generate -w {opts.workspace}`; continue the chat with --resume"
    )


def _run_chat(opts: RunOptions, out: Out) -> int:
    fresh = not _hostfs.exists(opts.workspace, opts.layout.memories_dir)
    with asyncio.Runner() as runner:
        chat = runner.run(_open(opts, out))
        try:
            try:
                _converse(runner, chat)
            except _EndedByCtrlC:
                click.echo("")
                click.echo(_ended_text(chat), err=True)
                return EXIT_INTERRUPTED
            if chat.turns and opts.generate:
                try:
                    runner.run(_generate(chat))
                except KeyboardInterrupt:
                    click.echo(_saved_text(chat), err=True)
                    return EXIT_INTERRUPTED
        finally:
            chat.history.close()
            with contextlib.suppress(Exception):
                runner.run(chat.sandbox.stop())
    if chat.turns and opts.generate and fresh:
        tip = git_tip(opts.workspace, opts.layout)
        if tip:
            out.note(tip + f"; ignore `{CHAT_DIR}/` too (chat history)")
    out.note(f"chat: {opts.rollout_id} (continue it with --resume or --session {opts.rollout_id})")
    for problem in chat.problems:
        click.echo(f"Error: {problem}", err=True)
    return 1 if chat.problems else 0


@click.command("chat")
@workspace_option(required=False)
@click.option(
    "--model",
    "-m",
    metavar="MODEL",
    help="The agent's model (as for `sandmem run`; `scripted`: offline, no server, its "
    "turns not recorded).",
)
@click.option(
    "--memory-model", metavar="MODEL", help="Model for both memory phases (as for `sandmem run`)."
)
@click.option("--resume", is_flag=True, help="Continue the last chat in this workspace.")
@click.option("--session", "session_id", metavar="ID", help="Start or continue the chat ID.")
@layout_options
@agent_options(recorded="the chat", turns="each agent run (one per message)")
@client_options
@click.pass_context
def chat_command(
    ctx: click.Context,
    workspace: Path,
    model: str | None,
    memory_model: str | None,
    resume: bool,
    session_id: str | None,
    memories_dir: str,
    sessions_dir: str,
    no_memory_read: bool,
    no_memory_generate: bool,
    engine: str,
    review: bool,
    max_turns: int,
) -> None:
    """Chat with a memory-enabled agent in a workspace, turn by turn.

    Each message is one agent run, streamed like `sandmem run`. The history is kept in
    DIR/.sandmem/chat.db, so --resume continues the last chat. Commands: /memory, /status,
    /exit. Memory is generated when the chat ends (/exit or Ctrl-D); Ctrl-C cancels the
    current turn, and at the prompt ends the chat at once (memory not generated). Exit
    status: 0, 1 memory generation did not complete, 2 usage error, 130 interrupted (Ctrl-C
    at the prompt or during memory generation). Reference: `sandmem docs cli`.
    """
    if resume and session_id:
        raise click.UsageError("use either --resume or --session, not both")
    workspace = workspace.absolute()  # the default is "."
    rollout_id, continued = _chat_id(workspace, session_id, resume)
    opts = RunOptions(
        workspace=workspace,
        prompt="",
        models=choose_models(model, memory_model, engine, workspace),
        rollout_id=rollout_id,
        resume=continued,
        layout=layout_config(memories_dir, sessions_dir),
        read=not no_memory_read,
        generate=not no_memory_generate and model != SCRIPTED,  # its turns carry no knowledge
        max_turns=max_turns,
        review=review,
    )
    opts.models = ready_models(opts.models)
    out = Out()
    out.note(f"sandmem: {opts.models.describe(memory=opts.generate)}")
    state = "continues" if continued else "new"
    out.note(f"chat {rollout_id} ({state}) in {workspace}. {HELP}")
    code = _run_chat(opts, out)
    if code:
        ctx.exit(code)
