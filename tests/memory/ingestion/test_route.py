"""``ingest_routed`` / ``sandmem memory ingest --route``: each fixture transcript is recorded
into the project memory of its working directory, transcripts of directories that are not
projects (or that record none) are skipped and reported, nothing is created outside a
project, and each project's consolidation sees only its own conversations."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ingest_fixtures import (
    SECRETS,
    Expected,
    claude_session_one,
    claude_session_two,
    codex_session_one,
    codex_session_two,
    codex_subagent,
    write_chat,
)

from sandmem.memory import MemoryGenerateConfig, ingest_routed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))
from cli_workspaces import invoke


def _move(expected: Expected, old: str, new: Path) -> None:
    expected.path.write_text(expected.path.read_text().replace(old, str(new)))


def _corpus(tmp_path: Path) -> dict[str, object]:
    """Transcripts of two projects, of a directory that is no project, of one that is gone
    from this machine, and an item list that records no directory."""
    shop = tmp_path / "work" / "shop"
    (shop / ".git").mkdir(parents=True)
    (shop / "billing").mkdir()
    webapp = tmp_path / "work" / "webapp"
    (webapp / ".hg").mkdir(parents=True)  # a configured marker
    loose = tmp_path / "work" / "scratch"
    loose.mkdir(parents=True)
    src = tmp_path / "transcripts"
    codex = codex_session_one(src / "codex")
    _move(codex, "/home/dev/shop", shop / "billing")  # a subdirectory of the project
    sub = codex_subagent(src / "codex" / "sub", codex)
    _move(sub, "/home/dev/shop", shop)
    docs = codex_session_two(src / "codex")
    _move(docs, "/srv/docs", loose)
    claude = claude_session_one(src / "claude")
    _move(claude, "/home/ana/webapp", webapp)
    gone = claude_session_two(src / "claude")  # /home/ana/infra: not on this machine
    chat = write_chat(src / "items" / "chat.json")
    return {
        "src": src,
        "shop": shop,
        "webapp": webapp,
        "loose": loose,
        "codex": codex,
        "sub": sub,
        "docs": docs,
        "claude": claude,
        "gone": gone,
        "chat": chat,
    }


def _recorded(project: Path) -> set[str]:
    return {p.stem for p in (project / "sessions").glob("*.jsonl")}


async def test_each_transcript_goes_to_its_project_and_the_others_are_skipped(
    tmp_path: Path,
) -> None:
    c = _corpus(tmp_path)
    shop, webapp, loose = Path(str(c["shop"])), Path(str(c["webapp"])), Path(str(c["loose"]))
    codex, claude = c["codex"], c["claude"]
    assert isinstance(codex, Expected) and isinstance(claude, Expected)
    report = await ingest_routed(
        [Path(str(c["src"]))], markers=(".git", ".hg"), generate_now=True, config=_extractive()
    )
    assert set(report.projects) == {str(shop), str(webapp)}
    assert _recorded(shop) == {f"codex-{codex.session_id}"}  # the sub-agent joined it
    assert _recorded(webapp) == {f"claude-{claude.session_id}"}
    assert not (loose / "sessions").exists() and not (loose / "memories").exists()
    skipped = {Path(s.path).name: s.error or "" for s in report.skipped}
    docs, gone, chat = c["docs"], c["gone"], c["chat"]
    assert isinstance(docs, Expected) and isinstance(gone, Expected)
    assert isinstance(chat, Expected)
    assert set(skipped) == {docs.path.name, gone.path.name, chat.path.name}
    assert "not in a project" in skipped[docs.path.name]
    assert "not in a project" in skipped[gone.path.name]
    assert "no working directory recorded" in skipped[chat.path.name]
    # each project consolidated from its own conversations only
    shop_memory = (shop / "memories" / "MEMORY.md").read_text()
    web_memory = (webapp / "memories" / "MEMORY.md").read_text()
    assert "Distilled from 1 conversation(s)".lower() in shop_memory.lower()
    assert "Distilled from 1 conversation(s)".lower() in web_memory.lower()
    assert f"codex-{codex.session_id[:20]}" in shop_memory and "signup" not in shop_memory
    assert f"claude-{claude.session_id[:20]}" in web_memory and "invoice" not in web_memory
    for project in (shop, webapp):
        for path in project.rglob("*"):
            if path.is_file() and path.suffix in (".md", ".jsonl", ".json"):
                text = path.read_text(errors="replace")
                assert not any(secret in text for secret in SECRETS), path
    # again: nothing new, nothing twice
    again = await ingest_routed([Path(str(c["src"]))], markers=(".git", ".hg"))
    assert again.recorded_segments == 0
    assert {s.status for r in again.projects.values() for s in r.sources} == {"unchanged"}


def _extractive() -> MemoryGenerateConfig:
    return MemoryGenerateConfig.for_model("extractive")


async def test_a_directory_without_a_marker_is_never_given_memory(tmp_path: Path) -> None:
    c = _corpus(tmp_path)
    report = await ingest_routed([Path(str(c["src"]))], markers=("pyproject.toml",))
    assert report.projects == {}
    assert len(report.skipped) == 6
    for name in ("shop", "webapp", "loose"):
        root = Path(str(c[name]))
        assert not (root / "sessions").exists() and not (root / "memories").exists()


def test_the_route_command_reports_where_each_transcript_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _corpus(tmp_path)
    home = tmp_path / "sandmem-home"
    home.mkdir()
    (home / "config.toml").write_text('[scopes]\nproject_markers = [".git", ".hg"]\n')
    env = {"SANDMEM_HOME": str(home)}
    result = invoke("memory", "ingest", "--route", c["src"], env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"{c['shop']}: " in out and f"{c['webapp']}: " in out
    assert "not routed (3):" in out and "no working directory recorded" in out
    data = json.loads(invoke("memory", "ingest", "--route", c["src"], "--json", env=env).stdout)
    assert set(data["projects"]) == {str(c["shop"]), str(c["webapp"])}
    assert len(data["skipped"]) == 3
    for clash in (["-w", str(tmp_path)], ["--cwd", "/x"], ["--all-projects"]):
        refused = invoke("memory", "ingest", "--route", *clash, c["src"], env=env)
        assert refused.exit_code == 2 and "--route" in refused.stderr
    missing = invoke("memory", "ingest", "--route", tmp_path / "nope", env=env)
    assert missing.exit_code == 2
