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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandmem.memory import diff_sync, log_sync, redact_history_sync, restore_sync
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
    """Versions made one second apart, one clock for both branches (the same second on both
    branches is the case of ``_same_second_branches``)."""
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


def _same_second_branches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose branches ``main`` and ``other`` each made version 1 in the same
    second (one clock for both), before they are merged."""
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
    return repo


def _records(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / "memories" / ".history" / "versions").iterdir())


def test_versions_recorded_the_same_second_on_two_branches_merge_without_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each branch made version 1 in the same second: the records' names carry a tag of
    their bytes, so the merge adds both records and git reports no conflict."""
    repo = _same_second_branches(tmp_path, monkeypatch)
    merged = _git(repo, "merge", "-q", "--no-edit", "other", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert _git(repo, "diff", "--name-only", "--diff-filter=U").stdout == ""
    assert _git(repo, "status", "--porcelain").stdout == ""
    names = _records(repo)
    assert len(names) == 2 and all(n.startswith("00000001-1800000000-") for n in names)
    memory = repo / "memories" / "MEMORY.md"
    assert memory.read_text() == BASE + "- ours\n- theirs\n"
    # both are versions the history reads; the next version is numbered past them
    assert sorted(v.note or "" for v in log_sync(repo)) == ["ours", "theirs"]
    memory.write_text(memory.read_text() + "- merged\n")
    asyncio.run(_version(repo, "after the merge"))
    log = log_sync(repo)
    assert [v.version for v in log] == [2, 1, 1] and log[0].note == "after the merge"
    assert "- merged" in diff_sync(repo).diff


def test_a_record_named_by_an_earlier_release_is_read_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records named ``<seq>-<epoch>.json`` (no tag) sit beside new ones: log, diff,
    restore and redact-history read both, in order, and a rewrite keeps each name."""
    _clock(monkeypatch)
    root = tmp_path / "ws"
    (root / "memories").mkdir(parents=True)
    (root / "sessions").mkdir()
    memory = root / "memories" / "MEMORY.md"
    memory.write_text(BASE + "- token hunter2-old\n")
    asyncio.run(_version(root, "old release"))
    [tagged] = _records(root)
    old_name = "-".join(tagged.split("-")[:2]) + ".json"  # as an earlier release named it
    versions_dir = root / "memories" / ".history" / "versions"
    (versions_dir / tagged).rename(versions_dir / old_name)
    memory.write_text(BASE + "- token hunter2-new\n")
    asyncio.run(_version(root, "new release"))
    names = _records(root)
    assert names[0] == old_name and len(names) == 2 and names[1].count("-") == 2
    assert [(v.version, v.note) for v in log_sync(root)] == [(2, "new release"), (1, "old release")]
    assert "hunter2-old" in diff_sync(root, 1, 2).diff
    assert restore_sync(root, 1).restored_from == 1
    assert "hunter2-old" in memory.read_text()
    result = redact_history_sync(root, r"hunter2-\w+")
    assert result.versions == [1, 2, 3]
    assert _records(root)[:2] == names  # rewritten in place: no record left with the secret
    for path in versions_dir.iterdir():
        assert "hunter2" not in path.read_text()
    for path in (root / "memories" / ".history" / "objects").iterdir():
        assert b"hunter2" not in path.read_bytes()
    assert [v.version for v in log_sync(root)] == [3, 2, 1]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("00000007-1800000000.json", (7, 1800000000)),
        ("00000007-1800000000-0a1b2c3d4e5f.json", (7, 1800000000)),
        ("00000007-1800000000-" + "f" * 64 + ".json", (7, 1800000000)),
        ("00000007-1800000000-0A1B2C3D4E5F.json", None),  # the tag is lower-case hex
        ("00000007-1800000000-0a1b.json", None),  # too short to be a tag
        ("00000007-1800000000-x0a1b2c3d4e5.json", None),
        ("00000007-1800000000-0a1b2c3d4e5f-1.json", None),
        ("00000007-1800000000-.json", None),
        ("00000007.json", None),
        ("\uff17-1.json", None),  # a digit that is not ASCII (fullwidth seven)
        ("00000007-1800000000.json.tmp", None),
        ("00000007--1800000000.json", None),
        ("+7-1800000000.json", None),
        ("00000007-1800000000-" + "f" * 65 + ".json", None),
        ("00000007-1800000000.JSON", None),
    ],
)
def test_record_names_old_and_new_are_parsed_and_others_are_not(
    name: str, parsed: tuple[int, int] | None
) -> None:
    from sandmem.memory.history import _version_name

    assert _version_name(name) == parsed


_fixed_name = st.builds(
    lambda seq, epoch, tag: f"{seq:08d}-{epoch}-{tag}.json",
    st.integers(0, 10**8 - 1),
    st.integers(10**9, 10**10 - 1),
    st.text("0123456789abcdef", min_size=12, max_size=12),
)
_other_name = st.sampled_from(
    [
        "123456789-1800000000-0a1b2c3d4e5f.json",  # a 9-digit number
        "00000007-180000000-0a1b2c3d4e5f.json",  # a 9-digit second
        "00000007-1800000000.json",  # an earlier release's name
        "00000007-1800000000-" + "f" * 64 + ".json",  # a longer tag
        "00000007-1800000000-0a1b2c3d4e5f.json.tmp",
        "00000007-1800000000-0A1B2C3D4E5F.json",
        "00000007-1800000000-0a1b2c3d4e5f.json\n00000008-1800000000-0a1b2c3d4e5f.json",
        "7-9.json",
        "notes.txt",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_fixed_name, max_size=12), st.lists(_other_name, max_size=3), st.randoms())
@example(  # one number, two widths of second: by name "18..." would come after "10..."
    ["00000007-1000000000-0a1b2c3d4e5f.json"], ["00000007-180000000-0a1b2c3d4e5f.json"], None
).via("a second of 9 digits")
def test_records_are_ordered_by_number_then_second_whatever_names_are_listed(
    fixed: list[str], other: list[str], rnd: object
) -> None:
    """The shortcut for names of ``record_name``'s widths gives the order that parsing each
    name gives, for any listing order and with any other name among them."""
    import random

    from sandmem.memory.history import _version_name, ordered_names

    for names in (fixed, fixed + other):
        listed = list(names)
        if isinstance(rnd, random.Random):
            rnd.shuffle(listed)
        parsed = sorted((order, n) for n in listed if (order := _version_name(n)))
        assert ordered_names(listed) == [n for _order, n in parsed]


def test_a_new_record_name_is_its_number_second_and_a_tag_of_its_bytes() -> None:
    from sandmem.memory.history import name_order, record_name

    a = record_name(3, 1_800_000_000, b'{"note": "a"}')
    b = record_name(3, 1_800_000_000, b'{"note": "b"}')
    assert a != b and a.startswith("00000003-1800000000-") and a.endswith(".json")
    assert record_name(3, 1_800_000_000, b'{"note": "a"}') == a
    ordered = sorted(["00000010-5.json", b, "00000002-9.json", a], key=name_order)
    assert ordered[0] == "00000002-9.json" and ordered[-1] == "00000010-5.json"
