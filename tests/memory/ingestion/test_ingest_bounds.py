"""Bounds on what one ingested transcript can cost: a source's title (which every segment of
its session carries) is cut to ``max_title_chars``; a transcript swapped for a FIFO or another
special file is refused on the open descriptor, never opened blocking."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from ingest_fixtures import _Claude, _jsonl

from sandmem import UserError
from sandmem import memory as api
from sandmem.memory.ingestion import _detect
from sandmem.memory.ingestion._ingest import MAX_TITLE_CHARS
from sandmem.memory.ingestion._open import NotRegularFile, open_regular, read_regular

SID = "5e6f7a8b-1c2d-4e3f-8a9b-0c1d2e3f4a5b"


def claude_transcript(path: Path, title: str, turns: int = 30) -> Path:
    c = _Claude(SID, "/home/ana/webapp")
    c.rows.append({"type": "summary", "summary": title, "leafUuid": "leaf"})
    for n in range(turns):
        c.entry("user", f"Step {n}: fix the form validation in web/forms.py, part {n}")
        c.entry("assistant", [{"type": "text", "text": f"Done with step {n}: tests pass."}])
    return _jsonl(path, c.rows)


def segments(ws: Path) -> list[dict[str, Any]]:
    [rollout] = (ws / "sessions").glob("claude-*.jsonl")
    return [json.loads(line) for line in rollout.read_text().splitlines()]


@pytest.mark.parametrize("title", ["T" * 256 * 1024, "Ünïcödé title " * 20_000])
async def test_a_huge_title_is_cut_in_every_segment(tmp_path: Path, title: str) -> None:
    source = claude_transcript(tmp_path / "claude.jsonl", title)
    ws = tmp_path / "ws"
    ws.mkdir()
    report = await api.ingest(ws, [source], format="claude-code")
    assert report.recorded_segments >= 2
    found = segments(ws)
    assert all(len(s["source"]["title"]) <= MAX_TITLE_CHARS for s in found)
    assert all(s["source"]["title"].endswith("…") for s in found)
    [rollout] = (ws / "sessions").glob("claude-*.jsonl")
    # the title no longer multiplies: the conversation is smaller than its transcript
    assert rollout.stat().st_size < source.stat().st_size


@pytest.mark.parametrize("field", ["sessionId", "cwd"])
async def test_a_huge_session_id_or_cwd_is_cut_in_every_segment(tmp_path: Path, field: str) -> None:
    source = claude_transcript(tmp_path / "claude.jsonl", "Signup fix", turns=10)
    huge = "s" * 256 * 1024
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    for row in rows:
        if field in row:
            row[field] = huge
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ws = tmp_path / "ws"
    ws.mkdir()
    await api.ingest(ws, [source], format="claude-code")
    [rollout] = (ws / "sessions").glob("claude-*.jsonl")
    assert rollout.stat().st_size < source.stat().st_size // 10
    key = "session_id" if field == "sessionId" else "cwd"
    assert all(len(s["source"].get(key, "")) <= 4096 for s in segments(ws))


@pytest.mark.parametrize("limit", [1, 40, 2000])
async def test_the_title_bound_is_configurable(tmp_path: Path, limit: int) -> None:
    title = "Signup form fix " * 200
    source = claude_transcript(tmp_path / "claude.jsonl", title, turns=3)
    ws = tmp_path / "ws"
    ws.mkdir()
    await api.ingest(ws, [source], format="claude-code", max_title_chars=limit)
    titles = {s["source"]["title"] for s in segments(ws)}
    [kept] = titles
    assert len(kept) == min(limit, len(title)) and title.startswith(kept.rstrip("…"))


async def test_a_short_title_is_kept_whole(tmp_path: Path) -> None:
    source = claude_transcript(tmp_path / "claude.jsonl", "Signup fix", turns=2)
    ws = tmp_path / "ws"
    ws.mkdir()
    await api.ingest(ws, [source], format="claude-code")
    assert {s["source"]["title"] for s in segments(ws)} == {"Signup fix"}


@pytest.mark.parametrize("bad", [0, -5])
async def test_the_title_bound_must_be_positive(tmp_path: Path, bad: int) -> None:
    with pytest.raises(UserError, match="max_title_chars"):
        await api.ingest(tmp_path, [], max_title_chars=bad)


# ---------------------------------------------------------------- special files


class Unblocker:
    """Opens ``fifo`` for writing after a while, so that a reader blocked on it (the fault
    under test) is released and the test fails instead of hanging; ``needed`` tells whether
    it had to."""

    def __init__(self, fifo: Path) -> None:
        self.fifo, self.needed, self._stop = fifo, False, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(15):
            return
        self.needed = True
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK) if self.fifo.exists() else -1
        if fd >= 0:
            os.close(fd)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_open_regular_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    guard = Unblocker(fifo)
    try:
        with pytest.raises(NotRegularFile):
            open_regular(fifo)
        with pytest.raises(NotRegularFile):
            read_regular(fifo, 10)
        with pytest.raises(NotRegularFile):
            _detect.detect(fifo)
        with pytest.raises(OSError):
            open_regular(tmp_path)  # a directory
    finally:
        guard.stop()
    assert not guard.needed


def test_open_regular_reads_a_file_and_a_link_to_one(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_bytes(b'{"a": 1}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert read_regular(link) == b'{"a": 1}\n'
    with open_regular(real) as stream:
        assert stream.read(4) == b'{"a"'


@pytest.mark.parametrize("when", ["before the format is told", "after the format is told"])
async def test_a_transcript_swapped_for_a_fifo_mid_ingest_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    source = claude_transcript(tmp_path / "claude.jsonl", "Signup fix", turns=2)
    ws = tmp_path / "ws"
    ws.mkdir()

    def swap() -> None:
        source.unlink()
        os.mkfifo(source)

    if when == "before the format is told":  # the is_file check passed on the real file
        real_is_file = Path.is_file

        def is_file_then_swap(self: Path) -> bool:
            found = real_is_file(self)
            if self == source and found:
                swap()
            return found

        monkeypatch.setattr(Path, "is_file", is_file_then_swap)
    else:
        real_detect = _detect.detect

        def detect_then_swap(path: Path) -> _detect.Detection:
            found = real_detect(path)
            swap()
            return found

        monkeypatch.setattr(_detect, "detect", detect_then_swap)
    guard = Unblocker(source)
    try:
        report = await api.ingest(ws, [source], format="claude-code")
    finally:
        guard.stop()
    assert not guard.needed  # nothing ever waited on the FIFO
    [found] = report.sources
    assert found.status == "failed" and "not a regular file" in (found.error or "")
