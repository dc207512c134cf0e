"""What the commands share: layout options, opening a workspace, choosing the memory engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import TypeAdapter, ValidationError

from sandmem._errors import UserError
from sandmem._terminal import json_text
from sandmem.cli._settings_file import SETTINGS_FILE, ConfigError
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

ENGINES = ("model", "extractive")


def _block_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def sigint_to_main_thread() -> None:
    """Give the running loop a default executor whose threads block SIGINT, so Ctrl-C always
    reaches the main thread: otherwise the kernel may hand it to a worker thread, and a main
    thread blocked reading the terminal (``input()``) or waiting in the loop never sees it."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(initializer=_block_sigint))


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, the result passed outside the task: on Python 3.11
    ``asyncio.run`` ends by formatting the repr of its SIGINT handler, which holds the main
    task and so the repr of its result (1.2 s for a ``MemoryStatus`` of 10,000
    conversations)."""
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    asyncio.run(main())
    return box[0]


def emit_model(value: Any) -> None:
    """A result model (or a list or dict holding them) as indented JSON on stdout."""
    data = TypeAdapter(Any).dump_python(value, mode="json")
    click.echo(json_text(json.dumps(data, indent=2, ensure_ascii=False)))


def workspace_option(*, required: bool) -> Callable[[F], F]:
    kwargs: dict[str, Any] = {"required": True} if required else {"default": "."}
    return click.option(
        "--workspace",
        "-w",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        show_default=not required,
        help="The workspace directory (used in place: it is the sandbox workspace).",
        **kwargs,
    )


def layout_options(fn: F) -> F:
    """``--memories-dir`` and ``--sessions-dir`` (the layout, relative to the workspace)."""
    fn = click.option(
        "--sessions-dir",
        default="sessions",
        show_default=True,
        help="Where rollouts are recorded, relative to the workspace.",
    )(fn)
    fn = click.option(
        "--memories-dir",
        default="memories",
        show_default=True,
        help="Where memory lives, relative to the workspace.",
    )(fn)
    return fn


def engine_options(fn: F) -> F:
    """``--engine`` and ``--model``: which engine generates memory."""
    from sandmem.cli._models import client_options  # the model commands' modules, not memory's

    fn = click.option(
        "--model",
        "--memory-model",
        "-m",
        "model",
        metavar="MODEL",
        help="Model name for both memory phases, or 'extractive' for the offline engine "
        "(default: $SANDMEM_MEMORY_MODEL, else the workspace's sandmem.toml [memory] model, "
        "else $SANDMEM_MODEL, else on a server that is not OpenAI's the one model it lists, "
        "else the configured phase models).",
    )(fn)
    fn = click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="model",
        show_default=True,
        help="'extractive': deterministic memory generation without a model "
        "(the same as --model extractive).",
    )(fn)
    return client_options(fn)


def flush_timeout_option(what: str) -> Callable[[F], F]:
    """``--flush-timeout SECONDS``: how long ``what`` (one memory generation) may take
    (``MemoryGenerateConfig.flush_timeout_s``; ``None`` keeps its default)."""
    return click.option(
        "--flush-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help=f"How long {what} may take [600]; a consolidation it cuts short falls back to "
        "the extractive engine.",
    )


def review_option(fn: F) -> F:
    """``--review``: review mode (changes to memory become proposals in the inbox)."""
    return click.option(
        "--review",
        is_flag=True,
        help="Review mode: changes to memory (a consolidation, an edit) become proposals in "
        "`sandmem memory inbox` instead of changing memory; `sandmem memory approve ID` "
        "applies one.",
    )(fn)


def layout_config(memories_dir: str, sessions_dir: str) -> MemoryLayoutConfig:
    """The layout of ``--memories-dir`` / ``--sessions-dir`` (a usage error when invalid)."""
    try:
        return MemoryLayoutConfig(memories_dir=memories_dir, sessions_dir=sessions_dir)
    except ValidationError as exc:
        problems = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in exc.errors())
        raise click.BadParameter(problems, param_hint="--memories-dir/--sessions-dir") from None


def store_options(fn: F) -> F:
    """``--store s3://BUCKET/PREFIX`` and ``--endpoint-url``: the layout's remote store."""
    fn = click.option(
        "--endpoint-url",
        default=lambda: os.environ.get("SANDMEM_S3_ENDPOINT_URL"),
        help="S3-compatible endpoint of --store [$SANDMEM_S3_ENDPOINT_URL; AWS when unset].",
    )(fn)
    return click.option(
        "--store",
        "store_url",
        metavar="s3://BUCKET/PREFIX",
        default=None,
        help="The layout's remote store (distributed mode): the memory and history kept "
        "there, as workers and other hosts made them, is what the command reads and changes.",
    )(fn)


def store_layout(
    memories_dir: str, sessions_dir: str, store_url: str | None, endpoint_url: str | None
) -> MemoryLayoutConfig:
    """The layout of ``--memories-dir`` / ``--sessions-dir``, in ``--store`` when given."""
    layout = layout_config(memories_dir, sessions_dir)
    if store_url is None:
        return layout
    from sandmem.distributed import S3MemoryStore

    store = S3MemoryStore.from_url(store_url, endpoint_url=endpoint_url)
    return MemoryLayoutConfig(memories_dir=memories_dir, sessions_dir=sessions_dir, store=store)


def rollout_file(layout: MemoryLayoutConfig, rollout_id: str) -> str:
    """Where a conversation is recorded, relative to the workspace (the documented
    ``<sessions_dir>/<rollout_id>.jsonl``), for messages."""
    return f"{layout.sessions_dir}/{rollout_id}.jsonl"


def memory_command_config(
    engine: str, model: str | None, workspace: Path | None = None
) -> MemoryGenerateConfig:
    """The generate config of the memory commands for ``--engine`` / ``--model``.

    ``--engine extractive`` runs both phases without a model. ``--model M`` (else
    ``SANDMEM_MEMORY_MODEL``, else the workspace's ``sandmem.toml``, else ``SANDMEM_MODEL``,
    else on a server that is not OpenAI's the one model it lists) uses ``M`` for both phases
    with the server's default settings (so it works for reasoning and non-reasoning models
    alike); ``extractive`` as ``M`` is the offline engine; none of them gives the configured
    defaults. A missing or unclear setting is a ``ConfigError`` (exit 2).
    """
    from sandmem.cli._models import (
        memory_model_for_server,
        named_memory_model,
        require_model_server,
    )

    if engine == EXTRACTIVE:
        if model is not None and model != EXTRACTIVE:
            raise click.UsageError("use either --engine extractive or --model, not both")
        return MemoryGenerateConfig.for_model(EXTRACTIVE)
    chosen = named_memory_model(model, "--model", workspace)
    named = chosen[0] if chosen is not None else None
    if named == EXTRACTIVE:
        return MemoryGenerateConfig.for_model(EXTRACTIVE)
    try:
        require_model_server(
            "; or generate memory without a model: --engine extractive (--model extractive), "
            f'SANDMEM_MEMORY_MODEL=extractive, or [memory] model = "extractive" in {SETTINGS_FILE}'
        )
        named = memory_model_for_server(named)
    except UserError as exc:
        raise ConfigError(str(exc)) from None
    return MemoryGenerateConfig.for_model(named)


def engine_note(engine: str, model: str | None, workspace: Path | None) -> str:
    """What a memory command would generate with, for a dry run (never raises: a missing
    setting is said, not raised)."""
    try:
        config = memory_command_config(engine, model, workspace)
    except click.ClickException as exc:
        return f"the real run needs a model: {exc.format_message()}"
    if config.phase_one_model == EXTRACTIVE:
        return "with the extractive engine (no model)"
    return f"with the model {config.phase_two_model} (a model server is needed)"


@contextlib.asynccontextmanager
async def open_workspace(workspace: Path) -> AsyncIterator[SandboxSession]:
    """A local sandbox session whose workspace is the existing directory ``workspace``."""
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=workspace))
    async with session:
        yield session


def git_tip(workspace: Path, layout: MemoryLayoutConfig) -> str | None:
    """Advice for the first memory written in a git work tree whose ``.gitignore`` does not
    cover the sessions directory yet (``None`` otherwise, or without git)."""
    git = shutil.which("git")
    if git is None:
        return None

    def git_ok(*args: str) -> subprocess.CompletedProcess[bytes] | None:
        try:
            return subprocess.run(
                [git, "-C", str(workspace), *args], capture_output=True, timeout=5, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    inside = git_ok("rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0 or inside.stdout.strip() != b"true":
        return None
    ignored = git_ok("check-ignore", "-q", layout.sessions_dir + "/")
    if ignored is None or ignored.returncode == 0:
        return None
    return (
        f"tip: {workspace} is in a git work tree: add `{layout.sessions_dir}/` to .gitignore (it "
        f"holds raw transcripts); commit `{layout.memories_dir}/` only if everyone working here "
        "should share what the agent learned, else ignore it too"
    )
