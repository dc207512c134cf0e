"""``sandmem memory view``: one self-contained HTML page of a workspace's memory."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from sandmem.cli._common import layout_config, layout_options, run_async, workspace_option
from sandmem.cli._output import emit_json
from sandmem.memory import MemoryLayoutConfig, view_html

DEFAULT_OUT = "memory-view.html"


def write_view(
    workspace: Path, layout: MemoryLayoutConfig, out: Path, page_number: int = 1
) -> Path:
    """Render the viewer page of ``workspace`` into ``out`` and return its absolute path.
    The default ``out`` is outside the memory files: the page is not memory, and agents
    should not find it when they search memory."""
    title = str(workspace.resolve())
    page = run_async(view_html(workspace, layout=layout, title=title, page=page_number))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out.resolve()


@click.command("view")
@workspace_option(required=False)
@layout_options
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Where to write the HTML page.",
)
@click.option(
    "--page",
    "page_number",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With more than 100 conversations: which page of them (newest first).",
)
@click.option("--open", "open_page", is_flag=True, help="Open the page in a web browser.")
@click.option("--json", "as_json", is_flag=True, help="Print the page's path as JSON.")
def view_command(
    workspace: Path,
    memories_dir: str,
    sessions_dir: str,
    out: Path,
    page_number: int,
    open_page: bool,
    as_json: bool,
) -> None:
    """Write one self-contained HTML page showing a workspace's memory.

    The page shows the summary as runs receive it, MEMORY.md with each task group linked to
    the rollout summaries it cites, every conversation (status, attempts, last error, tokens),
    the last consolidation's selection, the generation runs with tokens per phase, and memory
    size over time. It loads nothing from the network; all text is escaped. Over 100
    conversations it shows the newest 100 (--page N: the next ones) and only their rollout
    summaries and runs, plus those MEMORY.md cites.
    """
    layout = layout_config(memories_dir, sessions_dir)
    path = write_view(workspace, layout, out, page_number)
    opened = webbrowser.open(path.as_uri()) if open_page else False
    if as_json:
        emit_json({"path": str(path)})
    else:
        click.echo(f"wrote {path}")
    if open_page and not opened:
        raise click.ClickException(
            f"no web browser found to open the page (set BROWSER, or open {path} yourself)"
        )
