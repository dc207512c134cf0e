"""The transcript tier of search: recorded conversations (``sessions/``) indexed by byte offset,
redacted before they enter the index, merged after distilled memory, readable through
``show``, and gone from the index after ``forget``."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import age, gone_and_kept, segment_line
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace

from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.rollouts import RolloutSegment
from sandmem.memory.views import _index_search, _transcripts
from sandmem.memory.views._index import INDEX_NAME

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
SECRETS = (
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2,
    "AKIA" + "QWERTYUIOPASDFGH",
    "xoxb-123456789012-123456789012-" + "abcdefghijklmnopqrstuvwx",
)


def index_bytes(root: Path) -> bytes:
    return (root / PATHS.memories_dir / INDEX_NAME).read_bytes()


def stored_passages(root: Path) -> list[tuple[str, str]]:
    """Every passage of the index file as (conversation, text), its text read back from its
    block (the full-text table keeps none)."""
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        _transcripts.scratch(conn)
        rows = conn.execute("SELECT id, rid FROM passages").fetchall()
        text = _transcripts.bodies(conn, [int(pid) for pid, _ in rows])
        assert len(text) == len(rows)  # every block reads back
        return [(str(rid), text[int(pid)]) for pid, rid in rows]
    finally:
        conn.close()


def index_terms(root: Path) -> set[str]:
    conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, passages_fts, 'row')")
        return {str(t) for (t,) in conn.execute("SELECT term FROM temp.v")}
    finally:
        conn.close()


async def test_a_transcript_hit_names_its_conversation_segment_and_reads_back(
    tmp_path: Path,
) -> None:
    root = workspace(
        tmp_path,
        {
            "ci": turn("ci", "Set up CI", "Done, CI runs on push.")
            + turn("ci", "Which port does staging use?", "Staging listens on port 7431.", 1),
            "docs": turn("docs", "Write the README", "README written."),
        },
    )
    found = await api.search(root, "staging port")
    [hit] = [h for h in found.hits if h.tier == "transcript"][:1]
    assert (hit.rollout_id, hit.segment, hit.line) == ("ci", 2, 2)
    assert hit.path == PATHS.rollout_file("ci")
    assert hit.heading in ("user", "assistant")
    assert "7431" in (hit.text or "") or "staging" in hit.snippet.lower()
    shown = await api.show(root, "rollout", "ci")  # the read path the hit names
    line = shown.text.splitlines()[hit.segment - 1].encode()
    assert hit.text in [p.text for p in _transcripts.segment_passages(line, str)]
    # a tool output and a tool call are passages too
    root2 = workspace(
        tmp_path / "b",
        {"t": turn("t", "Run it", "Ran.", tool=("pytest -k flaky_quux", "3 passed in 0.2s"))},
    )
    kinds = {h.heading for h in (await api.search(root2, "flaky_quux passed")).hits}
    assert {"tool call", "tool output"} <= kinds
    # memory_only leaves them out
    assert not (await api.search(root, "staging port", transcripts=False)).hits


async def test_distilled_memory_comes_first_when_it_covers_the_query(tmp_path: Path) -> None:
    root = workspace(
        tmp_path,
        {"ci": turn("ci", "Which port does staging use?", "Port 7431 on staging.")},
    )
    (root / PATHS.memory_md).write_text("# Memory\n\n## Staging\n- staging port is 7431\n")
    found = await api.search(root, "staging port")
    assert [h.tier for h in found.hits][:2] == ["memory", "transcript"]
    # a query distilled memory does not cover: the transcript passage goes first
    found = await api.search(root, "which port does staging use")
    assert found.hits[0].tier == "transcript"


async def test_a_section_covers_the_query_only_as_far_as_the_line_it_shows(
    tmp_path: Path,
) -> None:
    """A long section holding the query's words on unrelated lines (a rollout summary's
    outcome list) does not push down the passage that holds them together."""
    root = workspace(
        tmp_path,
        {"cfg": turn("cfg", "Show the config", "Shown.", tool=("cat cfg.md", "export port 6001"))},
    )
    lines = [f"- Segment {n}: completed. Final answer: updated module {n}." for n in range(40)]
    lines[3] = "- Segment 3: the export was slow."
    lines[30] = "- Segment 30: the port was busy."
    (root / PATHS.memory_md).write_text("# Memory\n\n## Outcomes\n" + "\n".join(lines) + "\n")
    found = await api.search(root, "export port")
    assert found.hits[0].tier == "transcript" and "6001" in (found.hits[0].text or "")
    # the same words on the line it shows: distilled memory first again
    lines[30] = "- Segment 30: the export port was busy."
    (root / PATHS.memory_md).write_text("# Memory\n\n## Outcomes\n" + "\n".join(lines) + "\n")
    age(root)
    found = await api.search(root, "export port")
    assert found.hits[0].tier == "memory" and "export port" in found.hits[0].snippet


def test_merge_keeps_each_tier_in_order_and_prefers_distilled_on_ties() -> None:
    distilled = [("d1", 1.0), ("d2", 0.2), ("d3", 0.2)]
    passages = [("t1", 0.5), ("t2", 0.2), ("t3", 0.1)]

    def covers(hit: tuple[str, float]) -> float:
        return hit[1]

    merged = _transcripts.merge(distilled, passages, covers, 10)
    assert [h[0] for h in merged] == ["d1", "t1", "d2", "d3", "t2", "t3"]
    assert [h[0] for h in _transcripts.merge(distilled, passages, covers, 3)] == ["d1", "t1", "d2"]
    assert _transcripts.merge([], passages, covers, 2) == passages[:2]
    assert _transcripts.merge(distilled, [], covers, 2) == distilled[:2]
    assert _transcripts.coverage({"a"}, {"a": 3.0, "b": 1.0}) == 0.75
    assert _transcripts.coverage({"a"}, {}) == 0.0


def test_passages_cut_at_lines_and_skip_instructions() -> None:
    segment = RolloutSegment(
        1, None, "r", None,
        [{"role": "system", "content": "SYSTEM RULES"}, {"role": "user", "content": "q\n" * 500}],
        [{"role": "assistant", "content": "done"}], "final", [], {},
    )  # fmt: skip
    found = _transcripts.passages(segment, str.upper)
    assert all(len(p.text) <= _transcripts.PASSAGE_CHARS for p in found)
    assert not any("SYSTEM" in p.text for p in found)
    assert {p.kind for p in found} == {"user", "assistant", "final output"}
    assert found[-1].text == "FINAL"  # every piece went through the redactor
    assert list(_transcripts.split_text("")) == []
    assert list(_transcripts.split_text("x" * 1300)) == ["x" * 600, "x" * 600, "x" * 100]


async def test_appended_segments_are_parsed_alone_and_a_rewrite_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = workspace(tmp_path, {"a": turn("a", "first alpha question", "alpha answer")})
    await api.search(root, "alpha")
    parsed: list[bytes] = []
    real = _transcripts.line_passages

    def counting(lines: Any, *rest: Any) -> Any:
        lines = list(lines)
        parsed.extend(lines)
        return real(lines, *rest)

    monkeypatch.setattr(_transcripts, "line_passages", counting)
    age(root)
    with (root / PATHS.rollout_file("a")).open("a") as f:
        f.write(turn("a", "second bravo question", "bravo answer", 1))
    found = await api.search(root, "bravo")
    assert [json.loads(line)["input"][0]["content"] for line in parsed] == ["second bravo question"]
    assert found.hits[0].segment == 2
    # an unfinished last line waits for its newline
    parsed.clear()
    with (root / PATHS.rollout_file("a")).open("a") as f:
        f.write(turn("a", "third charlie", "charlie", 2).rstrip("\n"))
    assert not [h for h in (await api.search(root, "charlie")).hits if h.tier == "transcript"]
    assert parsed == []
    # a rewritten file (shorter, different) is indexed from the start: old words are gone
    (root / PATHS.rollout_file("a")).write_text(turn("a", "delta only", "delta"))
    assert not [h for h in (await api.search(root, "alpha bravo")).hits if h.tier == "transcript"]
    assert (await api.search(root, "delta")).hits[0].segment == 1
    # a removed file's passages go
    (root / PATHS.rollout_file("a")).unlink()
    assert (await api.search(root, "delta")).hits == []


@pytest.mark.parametrize("secret", SECRETS)
async def test_no_secret_in_a_transcript_enters_the_index(tmp_path: Path, secret: str) -> None:
    root = workspace(
        tmp_path,
        {
            "leak": turn(
                "leak",
                f"deploy with token {secret} please",
                f"Deployed using {secret}.",
                tool=(f"curl -H 'Authorization: Bearer {secret}' api", f"ok {secret}"),
            )
        },
    )
    found = await api.search(root, "deploy token")
    assert found.hits
    assert all(secret not in (h.text or "") + h.snippet for h in found.hits)
    data = index_bytes(root)
    for piece in (secret, secret[4:], secret[-12:]):
        assert piece.encode() not in data
    assert not any(secret.lower()[-10:] in term for term in index_terms(root))


async def test_forget_removes_the_conversation_from_every_page_of_the_index(
    tmp_path: Path,
) -> None:
    word = "quuxzanzibarword"
    root = gone_and_kept(tmp_path, word)
    await api.generate(root, engine="extractive")
    assert any(h.rollout_id == "gone" for h in (await api.search(root, word)).hits)
    assert word.encode() in index_bytes(root)
    await api.forget(root, "gone", engine="extractive")
    assert (await api.search(root, word)).hits == []
    assert word.encode() not in index_bytes(root)
    assert word not in index_terms(root)
    assert (await api.search(root, "linter")).hits


async def test_hits_are_rebuilt_after_reindex_and_redact_history(tmp_path: Path) -> None:
    root = workspace(tmp_path, {"r": turn("r", "the cache ttl is 300 seconds", "ok")})
    report = await api.reindex(root)
    assert report.bytes > 0
    assert (await api.search(root, "cache ttl")).hits[0].tier == "transcript"
    from sandmem.memory import redact_history

    await redact_history(root, "zzz-not-there")
    assert not (root / PATHS.memories_dir / INDEX_NAME).exists()
    assert (await api.search(root, "cache ttl")).hits[0].rollout_id == "r"


async def test_transcript_search_needs_segments_and_ignores_junk(tmp_path: Path) -> None:
    root = workspace(
        tmp_path,
        {
            "junk": 'not json\n{"x": 1}\n\n' + segment_line("junk", "tidy the garage"),
            "bad name!": segment_line("x", "hidden words"),
        },
    )
    (root / PATHS.sessions_dir / "nested").mkdir()
    (root / PATHS.sessions_dir / "nested" / "n.jsonl").write_text(segment_line("n", "hidden"))
    hits = (await api.search(root, "garage hidden")).hits
    assert sorted((h.rollout_id, h.segment, h.heading) for h in hits) == [
        ("junk", 4, "assistant"),
        ("junk", 4, "user"),
    ]


# ---------------------------------------------------------------- redact-history and rebuilds

#: secrets of the workspace's own kind: no built-in detector knows them
CUSTOM = ("hunter2-prod-QZXW", "acme_int_77Kq9", "Pa55-tahoe-lake-9")


@pytest.mark.parametrize("secret", CUSTOM)
async def test_a_redact_history_pattern_never_returns_into_the_transcript_tier(
    tmp_path: Path, secret: str
) -> None:
    long_output = "log line\n" * 70 + f"db password {secret} set\n" + "more\n" * 70
    root = workspace(
        tmp_path,
        {
            "leak": turn("leak", f"use password {secret} for the staging db", "Using it now.")
            + turn("leak", "show the log", "Shown.", 1, tool=("cat db.log", long_output)),
            "clean": turn("clean", "set up the staging linter", "ruff configured"),
        },
    )
    await api.generate(root, engine="extractive")
    assert any(secret in (h.text or "") for h in (await api.search(root, "staging password")).hits)
    result = await api.redact_history(root, re.escape(secret))
    assert PATHS.rollout_file("leak") in result.still_in  # the transcript itself is kept

    word = max(re.findall(r"[^\W_]+", secret), key=len).lower()

    def leaked() -> bool:
        """The secret (or its rarest word) in a transcript hit, a passage or a term of the
        transcript tier. (Distilled memory is redact-history's own part: not checked here.)"""
        hits = asyncio.run(api.search(root, f"staging password {secret} db log")).hits
        if any(secret in (h.text or "") for h in hits if h.tier == "transcript"):
            return True
        bodies = [text for _, text in stored_passages(root)]
        assert any("staging" in b for b in bodies)  # the tier is there
        return any(secret in b or word in b.lower() for b in bodies) or word in index_terms(root)

    async def rebuilt_every_way() -> None:
        await api.search(root, "staging")  # rebuilt at its next use (redact-history removed it)
        assert not await asyncio.to_thread(leaked)
        await api.reindex(root)  # `index rebuild`
        assert not await asyncio.to_thread(leaked)
        (root / PATHS.memories_dir / INDEX_NAME).unlink()  # deleted by hand
        assert not await asyncio.to_thread(leaked)
        conn = sqlite3.connect(root / PATHS.memories_dir / INDEX_NAME)
        conn.execute("CREATE TABLE planted (x)")  # fails its check: rebuilt
        conn.commit()
        conn.close()
        assert not await asyncio.to_thread(leaked)

    await rebuilt_every_way()
    # what did not match is still indexed, in that conversation too
    kept = set(stored_passages(root))
    assert {("leak", "Using it now."), ("leak", "show the log")} <= kept
    assert ("clean", "ruff configured") in kept
    # a second pattern adds to the record; the first stays withheld
    await api.redact_history(root, "ruff configured")
    await rebuilt_every_way()
    hits = (await api.search(root, "ruff")).hits
    assert not any("ruff configured" in (h.text or "") for h in hits)


async def test_an_unusable_withheld_record_indexes_no_transcript(tmp_path: Path) -> None:
    secret = CUSTOM[0]
    root = workspace(tmp_path, {"leak": turn("leak", f"password {secret} here", "ok")})
    await api.redact_history(root, re.escape(secret))
    record = root / PATHS.memories_dir / _index_search.WITHHELD_NAME
    assert secret not in record.read_text()  # digests, never the pattern or the text
    for bad in ("not json", '{"leak": ["xyz"]}', '{"../x": []}', "[]"):
        record.write_text(bad)
        found = await api.search(root, f"password {secret}")
        assert not [h for h in found.hits if h.tier == "transcript"], bad
        assert secret.encode() not in index_bytes(root)
    record.unlink()
    record.symlink_to(tmp_path / "elsewhere.json")  # a planted link is not followed
    (tmp_path / "elsewhere.json").write_text("{}")
    found = await api.search(root, f"password {secret}")
    assert not [h for h in found.hits if h.tier == "transcript"]
    record.unlink()  # no record at all: the transcript is the user's to forget
    found = await api.search(root, f"password {secret}")
    assert any(secret in (h.text or "") for h in found.hits)


def test_withheld_passages_catch_a_match_cut_by_a_passage_boundary() -> None:
    secret = "hunter2-prod-QZXW"
    text = "x" * 590 + "\n" + secret + "\nrest"  # piece 1 ends before it, piece 2 holds it
    segment = json.loads(turn("r", text, "ok"))
    line = json.dumps(segment).encode()
    pieces = _transcripts.segment_passages(line, str)
    assert secret in pieces[1].text
    found = _transcripts.withheld_passages(line, lambda t: secret in t, str)
    assert _transcripts.passage_digest(pieces[1].text) in found
    assert _transcripts.passage_digest(pieces[0].text) not in found
    # a pattern spanning two pieces withholds both
    spanning = _transcripts.withheld_passages(line, lambda t: "xx\nhunter" in t, str)
    assert {_transcripts.passage_digest(p.text) for p in pieces[:2]} <= spanning


@pytest.mark.parametrize("first", ["search", "status"])
async def test_a_transcript_hit_names_its_rollout_summary_whatever_ran_first(
    tmp_path: Path, first: str
) -> None:
    """A layout whose index was first made by a search (no listing of conversations before
    it) still names each transcript hit's rollout summary, and a conversation without one
    names none."""
    root = workspace(
        tmp_path,
        {
            "ci": turn("ci", "Which port does staging use?", "Staging listens on port 7431."),
            "docs": turn("docs", "Write the README for staging", "README written."),
        },
    )
    await api.generate(root, engine="extractive")
    (root / PATHS.raw_memory_file("docs")).unlink()  # its raw memory gone: no summary named
    (root / PATHS.memories_dir / INDEX_NAME).unlink(missing_ok=True)
    age(root)
    if first == "status":
        await api.status(root)
    found = await api.search(root, "staging port 7431")
    by_id = {h.rollout_id: h for h in found.hits if h.tier == "transcript"}
    assert by_id["ci"].summary_file is not None
    assert (root / by_id["ci"].summary_file).is_file()
    assert (root / by_id["ci"].summary_file).parent.name == "rollout_summaries"
    if "docs" in by_id:
        assert by_id["docs"].summary_file is None


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("before", [590, 598, 31_990])
async def test_a_secret_a_passage_cut_would_split_is_still_redacted(
    tmp_path: Path, secret: str, before: int
) -> None:
    """A long line without a line break is cut every ``PASSAGE_CHARS`` characters, and an
    item at ``ITEM_CHARS``: a secret standing across a cut is found all the same (the item
    is redacted whole, then cut), and no part of it enters the index."""
    output = "x" * before + " " + secret + " " + "y" * 700
    root = workspace(tmp_path, {"cut": turn("cut", "show the log", "Done.", tool=("cat", output))})
    assert (await api.search(root, "show log")).hits
    data = index_bytes(root)
    passages = [text for _rid, text in stored_passages(root)]
    assert any("[REDACTED:" in text for text in passages) or before >= 31_990
    for piece in (secret[:8], secret[8:16], secret[-8:]):
        assert piece.encode() not in data
        assert not any(piece in text for text in passages)
