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
runs, sandmem's log warnings are printed as one readable line each, and everything printed on
stdout and stderr is stripped of control characters and escape sequences (``_terminal``: data
such as a client's name or an ingested task never acts on the terminal).
"""

from __future__ import annotations

from typing import Any

import click

from sandmem._errors import SandmemError
from sandmem._log_lines import readable_warnings
from sandmem._terminal import printable, safe_streams
from sandmem._version import __version__
from sandmem.cli._group import LazyGroup

__all__ = ["cli", "main"]


def _one_line(exc: BaseException) -> str:
    return " ".join(printable(str(exc), one_line=True).split()) or type(exc).__name__


#: the exit status after an interrupt (128 + SIGINT), as shells report it
EXIT_INTERRUPTED = 130


class _Group(LazyGroup):
    """A group that turns ``SandmemError`` into a one-line message (no traceback), an
    interrupt into exit status 130, and log warnings into one readable line each; what a
    command prints goes through the terminal sanitiser (``_terminal.safe_streams``)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with safe_streams(), readable_warnings():
                return super().invoke(ctx)
        except SandmemError as exc:
            raise click.ClickException(_one_line(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


#: the commands, imported when one runs (``sandmem.demo`` only when installed)
COMMANDS = {
    "chat": "sandmem.cli._chat_cmd:chat_command",
    "demo": "sandmem.cli._demo_cmd:demo_command",
    "docs": "sandmem.cli._docs_cmd:docs_command",
    "eval": "sandmem.cli._eval_cmd:eval_command",
    "mcp": "sandmem.cli._mcp_cmd:mcp_command",
    "memory": "sandmem.cli._memory_cmd:memory_group",
    "run": "sandmem.cli._run_cmd:run_command",
    "worker": "sandmem.cli._worker_cmd:worker_command",
}


@click.group(
    cls=_Group,
    lazy=COMMANDS,
    requires={"demo": "sandmem.demo"},
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="sandmem")
def cli() -> None:
    """sandmem: sandboxed LLM agents with memory that carries across runs.

    Memory lives in plain files in the workspace (memories/, sessions/). The documentation
    ships with the package: `sandmem docs` lists the pages, `sandmem docs cli` prints the CLI
    reference (every command, exit codes, examples).
    """


def main() -> None:
    """The ``sandmem`` console script."""
    cli(prog_name="sandmem")
