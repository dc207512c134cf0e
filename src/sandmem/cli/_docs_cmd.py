"""``sandmem docs``: the documentation that ships inside the package, for installed users."""

from __future__ import annotations

from pathlib import Path

import click

import sandmem


def docs_dir() -> Path | None:
    """Where the docs are: ``sandmem/_docs`` in an installed wheel, else ``docs/`` of the
    source checkout the package runs from (an editable install). ``None`` when neither exists."""
    package = Path(sandmem.__file__).resolve().parent
    for candidate in (package / "_docs", package.parents[1] / "docs"):
        if (candidate / "cli.md").is_file():
            return candidate
    return None


def _pages(where: Path) -> list[str]:
    return sorted(p.stem for p in where.glob("*.md"))


@click.command("docs")
@click.option("--path", "path_only", is_flag=True, help="Print only the docs directory.")
@click.argument("page", required=False)
def docs_command(page: str | None, path_only: bool) -> None:
    """Print a documentation page (default: list the pages and where they are).

    PAGE is a page name such as 'cli', 'quickstart' or 'configuration'. The docs ship with
    the package, so this works offline; `sandmem docs cli` is the CLI reference.
    """
    where = docs_dir()
    if where is None:
        raise click.ClickException(
            "the documentation is not installed with this copy of sandmem; reinstall it from "
            "a wheel (pip install sandmem) or read docs/ in the source repository"
        )
    if path_only:
        click.echo(str(where))
        return
    if page is None:
        click.echo(f"sandmem {sandmem.__version__} documentation: {where}")
        for name in _pages(where):
            click.echo(f"  sandmem docs {name}")
        return
    name = page.removesuffix(".md")
    target = where / f"{name}.md"
    if name not in _pages(where):
        choices = ", ".join(_pages(where))
        raise click.BadParameter(f"no page {page!r}; pages: {choices}", param_hint="PAGE")
    click.echo(target.read_text(encoding="utf-8"), nl=False)
