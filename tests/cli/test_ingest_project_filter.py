"""Ingesting an agent's home records one project's sessions: Codex and Claude Code homes are
filtered by the workspace by default (``--cwd``, ``--all-projects``), other transcripts are
not."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_workspaces import invoke, invoke_json

# ---------------------------------------------------------------- 7: one project's sessions


def _codex_home(tmp_path: Path, ws: Path) -> tuple[Path, str, str, str]:
    """A Codex home with three sessions: one in the workspace (a subdirectory of it), one in
    /home/dev/shop, one in /srv/docs."""
    from ingest_fixtures import codex_session_one, codex_session_two

    home = tmp_path / "codex-home"
    ours = codex_session_one(home / "sessions" / "a")
    text = ours.path.read_text().replace("/home/dev/shop", str(ws / "pkg"))
    ours.path.write_text(text)
    shop = codex_session_one(home / "sessions" / "b")  # the same id: give it another
    shop.path.write_text(shop.path.read_text().replace(ours.session_id, SHOP_ID))
    docs = codex_session_two(home / "sessions" / "c")
    return home, ours.session_id, SHOP_ID, docs.session_id


SHOP_ID = "0199ffff-0000-7000-8000-00000000beef"


def _recorded(ws: Path) -> set[str]:
    return {p.stem for p in (ws / "sessions").glob("*.jsonl")}


def test_codex_home_is_filtered_by_the_workspace_by_default(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, ours, _shop, _docs = _codex_home(tmp_path, ws)
    env = {"CODEX_HOME": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "sessions", env=env)
    assert result.exit_code == 0, result.stderr
    assert f"only sessions whose working directory is in {ws}" in result.stderr
    assert "2 session(s) of other projects left out" in result.stdout
    assert _recorded(ws) == {f"codex-{ours}"}
    data = invoke_json("memory", "ingest", "-w", ws, home / "sessions", "--json", env=env)
    left = [s for s in data["sources"] if s["status"] == "skipped"]
    assert len(left) == 2 and all(s["error"].startswith("another project:") for s in left)


@pytest.mark.parametrize(
    ("flags", "wanted"),
    [
        (["--cwd", "/home/dev/shop"], {"shop"}),
        (["--project", "/srv"], {"docs"}),
        (["--all-projects"], {"ours", "shop", "docs"}),
    ],
)
def test_cwd_project_and_all_projects(tmp_path: Path, flags: list[str], wanted: set[str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, ours, shop, docs = _codex_home(tmp_path, ws)
    ids = {"ours": ours, "shop": shop, "docs": docs}
    env = {"CODEX_HOME": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "sessions", *flags, env=env)
    assert result.exit_code == 0, result.stderr
    assert "only sessions whose working directory" not in result.stderr
    assert _recorded(ws) == {f"codex-{ids[w]}" for w in wanted}


def test_transcripts_outside_the_agent_homes_are_not_filtered(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, *_ids = _codex_home(tmp_path, ws)
    result = invoke("memory", "ingest", "-w", ws, home / "sessions")  # CODEX_HOME elsewhere
    assert result.exit_code == 0, result.stderr
    assert len(_recorded(ws)) == 3
    both = invoke("memory", "ingest", "-w", ws, home, "--cwd", "/x", "--all-projects")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_claude_home_is_filtered_too(tmp_path: Path) -> None:
    from ingest_fixtures import claude_session_one

    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "claude-home"
    claude_session_one(home / "projects")  # its cwd is /home/ana/webapp
    env = {"CLAUDE_CONFIG_DIR": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "projects", env=env)
    assert "1 session(s) of other projects left out" in result.stdout
    assert _recorded(ws) == set()
    mine = invoke("memory", "ingest", "-w", ws, home / "projects", "--cwd", "/home/ana", env=env)
    assert mine.exit_code == 0 and len(_recorded(ws)) == 1


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/home/dev/shop", True),
        ("/home/dev/shop/sub/dir", True),
        ("/home/dev/shop/../shop/x", True),
        ("/home/dev/shop2", False),
        ("/home/dev", False),
        ("relative/shop", False),
        ("", False),
        (None, False),
        ("/home/dev/shop/../../etc", False),
    ],
)
def test_in_directory(path: str | None, inside: bool) -> None:
    from sandmem.memory.ingestion._ingest import in_directory

    assert in_directory(path, "/home/dev/shop") is inside
