"""A project's memory kept in git: ``sandmem memory git-setup`` keeps raw transcripts, the
index and the generation state out; ``sandmem memory merge-driver`` merges memory files
keeping both sides' versions. Checked with real ``git`` in a temporary repository: two
branches that each changed the same part of ``MEMORY.md`` and recorded history versions merge
with no conflict, both sides' lines and versions kept."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandmem.memory import log_sync
from sandmem.memory._git import merge_texts
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.history import Attribution
from sandmem.memory.journal import notice
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_workspaces import invoke

BASE = "# Memory\n\n## Build\n- build with make\n- tests with pytest\n\n## Deploy\n- fly deploy\n"


def test_a_region_one_side_changed_takes_that_side() -> None:
    ours = BASE.replace("- fly deploy", "- fly deploy --remote-only")
    assert merge_texts(BASE, ours, BASE) == ours
    assert merge_texts(BASE, BASE, ours) == ours
    theirs = BASE.replace("- build with make", "- build with make -j4")
    both = merge_texts(BASE, ours, theirs)
    assert "- fly deploy --remote-only" in both and "- build with make -j4" in both
    assert "- build with make\n" not in both  # a change on one side is taken, not doubled


def test_a_region_both_sides_changed_keeps_both_versions() -> None:
    ours = BASE.replace("- tests with pytest", "- tests with pytest -x")
    theirs = BASE.replace("- tests with pytest", "- tests with make test")
    merged = merge_texts(BASE, ours, theirs)
    assert merged.index("- tests with pytest -x") < merged.index("- tests with make test")
    assert "<<<<<<<" not in merged and ">>>>>>>" not in merged
    assert merged.count("## Build") == 1 and merged.count("## Deploy") == 1
    # the same change on both sides is taken once
    assert merge_texts(BASE, ours, ours) == ours
    # additions at the same place on both sides are both kept
    a = BASE + "- note a\n"
    b = BASE + "- note b\n"
    assert merge_texts(BASE, a, b) == BASE + "- note a\n- note b\n"
    # a deletion on one side and an edit elsewhere on the other
    deleted = BASE.replace("- fly deploy\n", "")
    assert "fly deploy" not in merge_texts(BASE, deleted, theirs)
    # no final newline on one side; empty base (both created the file)
    assert merge_texts("", "x", "y") == "x\ny"
    assert merge_texts(BASE, BASE.rstrip("\n"), BASE) == BASE.rstrip("\n")


lines = st.lists(st.sampled_from(["a", "b", "c", "- d", "## e", ""]), max_size=8)


@settings(max_examples=80, deadline=None)
@given(lines, lines, lines)
def test_the_merge_keeps_every_line_both_sides_added(
    base: list[str], ours: list[str], theirs: list[str]
) -> None:
    text = [("\n".join(x) + "\n") if x else "" for x in (base, ours, theirs)]
    merged = merge_texts(*text)
    assert merge_texts(text[0], text[1], text[0]) == text[1]
    assert merge_texts(text[0], text[0], text[2]) == text[2]
    assert merge_texts(text[0], text[1], text[1]) == text[1]
    result = merged.splitlines()
    for line in {*ours, *theirs} - set(base):
        assert line in result


# ---------------------------------------------------------------- real git


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        # the merge driver is this checkout's sandmem
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


async def _version(repo: Path, note: str) -> None:
    """Version the hand edit just made (as a command that writes memory would)."""
    paths = MemoryPaths.of(MemoryLayoutConfig())
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=repo))
    async with session:
        from sandmem.memory import _files

        async with _files.lock(session, paths.lock, timeout=5):
            await notice(session, paths, Attribution("hand_edit", note=note))


pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Versions made one second apart (two machines rarely version in the same second; a
    record made the same second on both branches is the conflict shown below)."""
    from sandmem.memory import history

    ticks = iter(range(1_800_000_000, 1_800_001_000))

    def now() -> tuple[str, int]:
        epoch = next(ticks)
        return f"2027-01-15T08:00:{epoch % 60:02d}.000Z", epoch

    monkeypatch.setattr(history, "_now", now)


def test_two_branches_of_a_project_memory_merge_keeping_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clock(monkeypatch)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "memories" / "skills").mkdir(parents=True)
    (repo / "memories" / "raw_memories").mkdir()
    (repo / "sessions").mkdir()
    (repo / "memories" / "MEMORY.md").write_text(BASE)
    (repo / "memories" / "memory_summary.md").write_text("Builds with make.\n")
    (repo / "memories" / "raw_memories" / "mcp-notes.md").write_text("rollout_id: mcp-notes\n")
    result = invoke("memory", "git-setup", "-w", repo)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "git config merge.sandmem-memory.driver" in result.stdout
    # what stays out of git
    (repo / "sessions" / "run-1.jsonl").write_text('{"secret": "raw transcript"}\n')
    (repo / "memories" / "generation_state.json").write_text("{}")
    (repo / "memories" / ".index.sqlite").write_bytes(b"x")
    asyncio.run(_version(repo, "start"))
    _git(repo, "add", "-A")
    tracked = set(_git(repo, "ls-files", "--cached").stdout.split())
    assert "memories/MEMORY.md" in tracked and "memories/.gitattributes" in tracked
    assert any(p.startswith("memories/.history/versions/") for p in tracked)
    assert any(p.startswith("memories/.history/objects/") for p in tracked)
    for left_out in (
        "sessions/run-1.jsonl",
        "memories/generation_state.json",
        "memories/.index.sqlite",
        "memories/.lock",
    ):
        assert left_out not in tracked
    _git(repo, "commit", "-q", "-m", "memory")

    _git(repo, "checkout", "-q", "-b", "other")
    memory = repo / "memories" / "MEMORY.md"
    memory.write_text(BASE.replace("- tests with pytest", "- tests with make test"))
    raw = repo / "memories" / "raw_memories" / "mcp-notes.md"
    raw.write_text(raw.read_text() + "- theirs: deploys on Fridays\n")
    asyncio.run(_version(repo, "theirs"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "theirs")

    _git(repo, "checkout", "-q", "main")
    memory.write_text(BASE.replace("- tests with pytest", "- tests with pytest -x"))
    raw.write_text(raw.read_text() + "- ours: uses uv\n")
    asyncio.run(_version(repo, "ours"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "ours")

    merged = _git(repo, "merge", "-q", "--no-edit", "other", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    text = memory.read_text()
    assert "- tests with pytest -x" in text and "- tests with make test" in text
    assert "<<<<<<<" not in text
    notes = raw.read_text()
    assert "ours: uses uv" in notes and "theirs: deploys on Fridays" in notes
    # both branches' history versions are there, and the history reads them
    notes_seen = {v.note for v in log_sync(repo)}
    assert {"start", "ours", "theirs"} <= notes_seen
    assert _git(repo, "status", "--porcelain").stdout == ""


def test_the_merge_driver_leaves_binary_files_to_git(tmp_path: Path) -> None:
    base, ours, theirs = (tmp_path / n for n in ("base", "ours", "theirs"))
    base.write_text("a\n")
    ours.write_bytes(b"a\x00b\n")
    theirs.write_text("c\n")
    result = invoke("memory", "merge-driver", base, ours, theirs, "memories/MEMORY.md")
    assert result.exit_code == 1
    assert ours.read_bytes() == b"a\x00b\n"
    ours.write_text("a\nb\n")
    result = invoke("memory", "merge-driver", base, ours, theirs)
    assert result.exit_code == 0 and ours.read_text() == "a\nb\nc\n"


def test_a_version_recorded_the_same_second_on_both_branches_is_a_git_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented limit: a version record's name is its number and second, so two
    branches that each made version N in the same second both add one file under one name;
    git reports that record as a conflict (the memory files themselves still merge)."""
    from sandmem.memory import history

    monkeypatch.setattr(history, "_now", lambda: ("2027-01-15T08:00:00.000Z", 1_800_000_000))
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "memories").mkdir()
    (repo / "sessions").mkdir()
    memory = repo / "memories" / "MEMORY.md"
    memory.write_text(BASE)
    assert invoke("memory", "git-setup", "-w", repo).exit_code == 0
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    _git(repo, "checkout", "-q", "-b", "other")
    memory.write_text(BASE + "- theirs\n")
    asyncio.run(_version(repo, "theirs"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "theirs")
    _git(repo, "checkout", "-q", "main")
    memory.write_text(BASE + "- ours\n")
    asyncio.run(_version(repo, "ours"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "ours")
    merged = _git(repo, "merge", "-q", "--no-edit", "other", check=False)
    assert merged.returncode != 0
    conflicted = _git(repo, "diff", "--name-only", "--diff-filter=U").stdout.split()
    assert conflicted == ["memories/.history/versions/00000001-1800000000.json"]
    assert memory.read_text() == BASE + "- ours\n- theirs\n"
