"""Passages cut in worker processes (``_passage_worker``): a pool indexes exactly what this
process would, whatever the lines hold; a worker that dies, cannot start, answers nonsense or
imports another sandmem leaves its files to this process; a worker runs none of the caller's
code."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace

from sandmem import memory as api
from sandmem.memory.views import _passage_worker, _transcripts
from sandmem.memory.views._index import INDEX_NAME
from sandmem.redaction import redact

SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def hostile_lines() -> list[bytes]:
    """Rollout lines of every sort: plain, long (several blocks), with secrets (also one a
    cut would split), non-ASCII and a lone surrogate, broken JSON, an empty line, and a
    segment that is not one."""
    long_output = ("build step ok\n" * 1500) + "x" * 590 + SECRET + " tail"
    return [
        turn("r", "first question about redis", "redis answer").encode().rstrip(b"\n"),
        turn(
            "r", f"token is {SECRET} now", "noted", 1, tool=("make build", long_output)
        ).encode().rstrip(b"\n"),
        turn("r", "héllo wörld ✓ \udc80 lone", "ça va", 2).encode("utf-8", "surrogatepass")
        .rstrip(b"\n"),
        b'{"rollout_id": "r", "input": [',
        b"",
        json.dumps({"something": "else"}).encode(),
        turn("r", "last " + "word " * 400, "bye", 3).encode().rstrip(b"\n"),
    ]  # fmt: skip


def here(lines: list[bytes], withheld: frozenset[str] = frozenset()) -> list[_transcripts.Block]:
    return _transcripts.cut_blocks(lines, redact, withheld)


def test_a_worker_makes_the_blocks_this_process_makes() -> None:
    lines = hostile_lines()
    expected = here(lines)
    withheld = frozenset({_transcripts.passage_digest(expected[0][0][0][1].text)})
    pool = _passage_worker.Pool(2)
    try:
        asked = [pool.submit(lines, frozenset()), pool.submit(lines, withheld)]
        asked += [pool.submit([], frozenset()), pool.submit(lines[:1], frozenset())]
        got = [future.result() for future in asked]
    finally:
        pool.close()
    assert got == [expected, here(lines, withheld), [], here(lines[:1])]
    assert len(expected) >= 2  # the long output spans several blocks
    texts = [p.text for block, _packed in expected for _place, p in block]
    assert not any(SECRET in t for t in texts) and any("[REDACTED:" in t for t in texts)
    assert got[1] != got[0]  # the withheld passage is left out


def _pair(blocks: list[_transcripts.Block]) -> tuple[bytes, bytes]:
    return _passage_worker._encode(blocks)


@pytest.mark.parametrize(
    "answer",
    [
        b"not json",
        b'{"a": 1}',
        b"[[[], 5]]",  # a block of no passages
        b'[[[[0, "user", 0, "hi"]], 0]]',  # packed size 0
        b'[[[[0, "user", 0, "hi"]], 999]]',  # more packed bytes than were sent
        b'[[[[0, "boss", 0, "hi"]], 4]]',  # a kind that is none
        b'[[[[0, ["user"], 0, "hi"]], 4]]',  # a kind that is no string
        b'[[[[0, {"a": 1}, 0, "hi"]], 4]]',
        b'[[[[0, "user", -1, "hi"]], 4]]',
        b'[[[[0, "user", 0, 7]], 4]]',
        b'[[[[9, "user", 0, "hi"]], 4]]',  # a line past the lines sent
        b'[[[[true, "user", 0, "hi"]], 4]]',
        b'[[[[1, "user", 0, "a"], [0, "user", 0, "b"]], 4]]',  # lines out of order
        b'[[[[0, "user", 0, "hi"]], 2]]',  # packed bytes left over
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_an_answer_of_the_wrong_shape_is_not_taken(answer: bytes) -> None:
    assert _passage_worker._decode(answer, b"zzzz", 2) is None


def test_lines_past_what_a_frame_carries_are_cut_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_passage_worker, "FRAME_BYTES", 10)
    pool = _passage_worker.Pool(1)
    try:
        assert pool.submit([b"x" * 20], frozenset()).result() is None
        assert pool.submit([], frozenset()).result() == []
    finally:
        pool.close()


def test_an_answer_of_the_right_shape_reads_back() -> None:
    blocks = here(hostile_lines())
    assert _passage_worker._decode(*_pair(blocks), len(hostile_lines())) == blocks


def _rows(root: Path) -> list[tuple[object, ...]]:
    """Every passage row of the index with its text, and the full-text table's answer for a
    few words."""
    conn = sqlite3.connect(root / "memories" / INDEX_NAME)
    try:
        _transcripts.scratch(conn)
        rows = conn.execute(
            "SELECT id, rid, segment, kind, part, n FROM passages ORDER BY id"
        ).fetchall()
        texts = _transcripts.bodies(conn, [int(r[0]) for r in rows])
        found = [
            conn.execute(
                "SELECT rowid FROM passages_fts WHERE passages_fts MATCH ? ORDER BY rowid",
                (word,),
            ).fetchall()
            for word in ("redis", "staging", "redacted", "word")
        ]
        return [(*row, texts[int(row[0])]) for row in rows] + [tuple(f) for f in found]
    finally:
        conn.close()


def _layout(tmp_path: Path, name: str) -> Path:
    files = {
        f"c{i:02d}": turn(f"c{i:02d}", f"staging port question {i}", "port 7431")
        + "\n".join(line.decode("utf-8", "surrogatepass") for line in hostile_lines())
        + "\n"
        for i in range(12)
    }
    return workspace(tmp_path / name, files)


def pooled_from_now_on(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Index with two workers from the first byte on; the list gets each pool's size."""
    started: list[int] = []
    real = _passage_worker.Pool.__init__

    def counting(self: _passage_worker.Pool, count: int) -> None:
        started.append(count)
        real(self, count)

    monkeypatch.setattr(_passage_worker.Pool, "__init__", counting)
    monkeypatch.setattr(_passage_worker, "POOL_BYTES", 0)
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "2")
    return started


async def test_an_index_built_by_workers_is_the_one_built_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")
    alone, pooled = _layout(tmp_path, "alone"), _layout(tmp_path, "pooled")
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "0")
    await api.reindex(alone)
    started = pooled_from_now_on(monkeypatch)
    await api.reindex(pooled)
    assert started == [2]
    assert _rows(pooled) == _rows(alone)
    assert len(_rows(alone)) > 12 * 5


@pytest.mark.parametrize(
    "boot",
    [
        "import sys; sys.exit(0)",  # stops at once
        "import sys; sys.stdin.buffer.read(10); sys.exit(3)",  # dies mid-request
        # answers every request with nonsense
        "import json, sys; sys.path[:] = json.loads(sys.argv[1])\n"
        "from sandmem.memory.views._passage_worker import _read_frame, _write_frame\n"
        "while _read_frame(sys.stdin.buffer) is not None:\n"
        "    _read_frame(sys.stdin.buffer)\n"
        "    _write_frame(sys.stdout.buffer, b'junk!')\n"
        "    _write_frame(sys.stdout.buffer, b'z')\n"
        "    sys.stdout.buffer.flush()\n",
        "import time; time.sleep(0.2)",  # reads nothing, exits: a broken pipe
    ],
)
async def test_a_worker_that_fails_leaves_its_files_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, boot: str
) -> None:
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")
    alone, pooled = _layout(tmp_path, "alone"), _layout(tmp_path, "pooled")
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "0")
    await api.reindex(alone)
    monkeypatch.setattr(_passage_worker, "_BOOT", boot)
    monkeypatch.setattr(_passage_worker, "POOL_BYTES", 0)
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "2")
    with caplog.at_level(logging.WARNING, logger="sandmem.memory"):
        await api.reindex(pooled)
    assert _rows(pooled) == _rows(alone)
    said = "did not read back" if "junk" in boot else "an index worker stopped"
    assert said in caplog.text


async def test_a_worker_that_cannot_start_leaves_its_files_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")
    alone, pooled = _layout(tmp_path, "alone"), _layout(tmp_path, "pooled")
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "0")
    await api.reindex(alone)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3-not-there"))
    monkeypatch.setattr(_passage_worker, "POOL_BYTES", 0)
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "2")
    with caplog.at_level(logging.WARNING, logger="sandmem.memory"):
        await api.reindex(pooled)
    assert _rows(pooled) == _rows(alone)
    assert "index worker not started" in caplog.text


def test_a_worker_that_imports_another_sandmem_answers_nothing() -> None:
    boot = _passage_worker._BOOT
    path = json.dumps([entry for entry in sys.path if entry])
    done = subprocess.run(
        [sys.executable, "-I", "-c", boot, path, "/somewhere/else/sandmem"],
        input=b"\x00\x00\x00\x02[]\x00\x00\x00\x00",
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == b""
    answered = subprocess.run(
        [sys.executable, "-I", "-c", boot, path, _passage_worker._package()],
        input=b"\x00\x00\x00\x02[]\x00\x00\x00\x00",
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert answered.stdout == b"\x00\x00\x00\x02[]\x00\x00\x00\x00"  # no lines, no blocks


def test_a_worker_runs_none_of_the_callers_code(tmp_path: Path) -> None:
    """A script with no ``if __name__ == "__main__"`` guard, in a folder that also holds a
    module named like one a worker imports: the script runs once, the module never."""
    root = _layout(tmp_path, "ws")
    marks = tmp_path / "marks.txt"
    (tmp_path / "json.py").write_text(f"open({str(marks)!r}, 'a').write('shadow\\n')\n")
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.remove({str(tmp_path)!r})  # the caller's own json.py stays out of it
            open({str(marks)!r}, "a").write("script\\n")
            from sandmem import memory as api
            from sandmem.memory.views import _passage_worker
            _passage_worker.POOL_BYTES = 0
            api.reindex_sync({str(root)!r})
            """
        )
    )
    env = {"SANDMEM_INDEX_WORKERS": "2", "SANDMEM_SEARCH": "bm25", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, check=True, timeout=120)
    assert marks.read_text() == "script\n"


@pytest.mark.parametrize(
    ("value", "cpus", "expected"),
    [("", 8, 4), ("", 2, 2), ("", 1, 0), ("0", 8, 0), ("3", 1, 3), ("99", 2, 4), ("x", 8, 0)],
)
def test_how_many_workers(
    monkeypatch: pytest.MonkeyPatch, value: str, cpus: int, expected: int
) -> None:
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", value)
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(cpus)), raising=False)
    assert _passage_worker.workers() == expected


@pytest.mark.parametrize(
    ("executable", "frozen", "expected"),
    [
        ("/usr/bin/python3.11", False, True),
        ("/venv/bin/python", False, True),
        ("/opt/pypy3/bin/pypy3", False, True),
        ("/usr/bin/uwsgi", False, False),  # a host that embeds Python
        ("/app/myapp", True, False),  # a frozen application
        ("/usr/bin/python3", True, False),
        ("", False, False),
    ],
)
def test_workers_are_started_only_with_a_python(
    monkeypatch: pytest.MonkeyPatch, executable: str, frozen: bool, expected: bool
) -> None:
    monkeypatch.setattr(sys, "executable", executable)
    monkeypatch.setattr(sys, "frozen", frozen, raising=False)
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "2")
    assert (_passage_worker.interpreter() is not None) is expected
    assert _passage_worker.workers() == (2 if expected else 0)


async def test_a_search_that_catches_up_with_workers_finds_what_one_without_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only ``reindex``: the first search over many new conversations uses the pool too,
    and answers as a search without it does."""
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")
    alone, pooled = _layout(tmp_path, "alone"), _layout(tmp_path, "pooled")
    monkeypatch.setenv("SANDMEM_INDEX_WORKERS", "0")
    expected = await api.search(alone, "staging port 7431", limit=8)
    started = pooled_from_now_on(monkeypatch)
    found = await api.search(pooled, "staging port 7431", limit=8)
    assert started == [2]
    assert [(h.rollout_id, h.segment, h.text) for h in found.hits] == [
        (h.rollout_id, h.segment, h.text) for h in expected.hits
    ]
    assert any(h.tier == "transcript" for h in found.hits)
    assert _rows(pooled) == _rows(alone)
