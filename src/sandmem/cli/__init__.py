"""The ``sandmem`` command line: owns the commands, a thin layer over the public API on the
top floor, which may import everything and which nothing imports.

    sandmem run --workspace DIR PROMPT        an agent run with memory on DIR
    sandmem chat --workspace DIR              an interactive conversation, memory at the end
    sandmem memory tree|show|search|status    look at a workspace's memory
    sandmem memory generate|forget            change it without an agent run
    sandmem memory view                       one HTML page of a workspace's memory
    sandmem eval [SUITE]                      the same tasks with and without memory
    sandmem worker --broker URL --store S3    generate memory for sessions on other hosts
    sandmem mcp --workspace DIR               serve a workspace's memory to any MCP client
    sandmem demo                              the two-run memory demo (when installed)
    sandmem docs [PAGE]                       the documentation shipped with the package

Errors raised by sandmem (``SandmemError``) are printed as one line and exit with status 1;
usage errors exit with status 2; an interrupt (Ctrl-C) exits with status 130. While a command
runs, sandmem's log warnings are printed as one readable line each.
"""

from __future__ import annotations

from typing import Any

import click

from sandmem._errors import SandmemError
from sandmem._version import __version__
from sandmem.cli._chat_cmd import chat_command
from sandmem.cli._docs_cmd import docs_command
from sandmem.cli._eval_cmd import eval_command
from sandmem.cli._generate_cmd import forget_command, generate_command
from sandmem.cli._history_cmd import HISTORY_COMMANDS
from sandmem.cli._ingest_cmd import ingest_command
from sandmem.cli._mcp_cmd import mcp_command
from sandmem.cli._memory_cmd import memory_group
from sandmem.cli._models import client_options
from sandmem.cli._output import readable_warnings
from sandmem.cli._run_cmd import run_command
from sandmem.cli._view_cmd import view_command
from sandmem.cli._worker_cmd import worker_command

__all__ = ["cli", "main"]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: the exit status after an interrupt (128 + SIGINT), as shells report it
EXIT_INTERRUPTED = 130


class _Group(click.Group):
    """A group that turns ``SandmemError`` into a one-line message (no traceback), an
    interrupt into exit status 130, and log warnings into one readable line each."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with readable_warnings():
                return super().invoke(ctx)
        except SandmemError as exc:
            raise click.ClickException(_one_line(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sandmem")
def cli() -> None:
    """sandmem: sandboxed LLM agents with memory that carries across runs.

    Memory lives in plain files in the workspace (memories/, sessions/). The documentation
    ships with the package: `sandmem docs` lists the pages, `sandmem docs cli` prints the CLI
    reference (every command, exit codes, examples).
    """


def _register_demo(group: click.Group) -> None:
    """Add ``sandmem demo`` when the demo package is installed (it is built separately)."""
    try:
        from sandmem.demo import demo_command
    except ModuleNotFoundError as exc:
        if exc.name == "sandmem.demo":
            return
        raise
    group.add_command(client_options(demo_command), "demo")


memory_group.add_command(generate_command)
memory_group.add_command(forget_command)
memory_group.add_command(ingest_command)
memory_group.add_command(view_command)
for _command in HISTORY_COMMANDS:
    memory_group.add_command(_command)
cli.add_command(run_command)
cli.add_command(chat_command)
cli.add_command(memory_group)
cli.add_command(eval_command)
cli.add_command(docs_command)
cli.add_command(worker_command)
cli.add_command(mcp_command)
_register_demo(cli)


def main() -> None:
    """The ``sandmem`` console script."""
    cli(prog_name="sandmem")
