"""Passages cut in other processes: indexing many rollout files at once (``reindex``, or the
first search after many conversations came in) parses and redacts them on every core.

Cutting a rollout file's new lines into redacted passages and packing their texts in blocks
(``_transcripts.cut_blocks``: JSON parsing, 45 redaction rules over every item, JSON and zlib)
is three quarters of indexing the transcript tier, and it
needs no index: ``Pool`` hands it to worker processes while this process stores what they
send back (SQLite, one writer). A worker is this Python started in isolated mode (``-I``:
no current directory, no ``PYTHON*`` variables) with this process's module path, that
imports this module and nothing of the caller's: not ``multiprocessing``'s spawn, which
imports the caller's main script again in each worker (a script without an
``if __name__ == "__main__"`` guard would run once per worker). A worker that imports
another copy of sandmem than this one stops at once.

A worker touches no file: it reads the lines from its standard input and writes the blocks
to its standard output, each message a *frame* (4 bytes, big-endian: the length; then that
many bytes). A request is two frames: the withheld digests (a JSON list of strings) and the
lines (joined by ``\\n``). The answer is two frames: the blocks, a JSON list of
``[[[line, kind, part, text], ...], packed size]``, and the packed texts of every block one
after the other. An answer that is not that shape, a worker that dies or cannot start: the
file's lines are cut in this process instead (``Pool.submit``'s future gives ``None``), so
the index is the same either way.

``SANDMEM_INDEX_WORKERS``: how many workers (default: the CPUs this process may use, at
most ``MAX_WORKERS``, and none on one CPU); ``0`` cuts every passage in this process, as
does a process whose ``sys.executable`` is no Python (``interpreter``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

from sandmem.memory.views._transcripts import Block, Passage

logger = logging.getLogger("sandmem.memory")

#: workers at most (a pool's gain stops at the one writer that stores their passages)
MAX_WORKERS = 4
#: the new lines of one indexing pass that start a pool: starting workers costs ~0.2 s of
#: imports each, the time to cut ~2 MB here
POOL_BYTES = 8 << 20
#: one frame's bytes at most
FRAME_BYTES = 1 << 31
_KINDS = frozenset({"user", "assistant", "tool call", "tool output", "final output"})


def interpreter() -> str | None:
    """The Python to start workers with: ``sys.executable`` when it names one. In a frozen
    application, or a host that embeds Python (a WSGI server's binary is
    ``sys.executable`` there), starting it again would start the host: no workers then."""
    path = sys.executable
    if not path or getattr(sys, "frozen", False):
        return None
    name = os.path.basename(path).lower()
    return path if name.startswith(("python", "pypy")) else None


def workers() -> int:
    """How many worker processes a pool starts (``SANDMEM_INDEX_WORKERS``; ``0``: none;
    none at all when there is no ``interpreter`` to start)."""
    if interpreter() is None:
        return 0
    raw = os.environ.get("SANDMEM_INDEX_WORKERS", "").strip()
    if raw:
        try:
            return max(0, min(int(raw), MAX_WORKERS))
        except ValueError:
            logger.warning("SANDMEM_INDEX_WORKERS=%r is not a number: no index workers", raw)
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return min(cpus, MAX_WORKERS) if cpus > 1 else 0


# ---------------------------------------------------------------- the frames


def _write_frame(out: IO[bytes], data: bytes) -> None:
    out.write(len(data).to_bytes(4, "big"))
    out.write(data)


def _read_frame(source: IO[bytes]) -> bytes | None:
    """The next frame; ``None`` at the end of the stream (or a frame cut short)."""
    header = source.read(4)
    if len(header) < 4:
        return None
    size = int.from_bytes(header, "big")
    data = source.read(size) if size < FRAME_BYTES else b""
    return data if len(data) == size else None


def _encode(blocks: list[Block]) -> tuple[bytes, bytes]:
    meta = [
        [[[place, p.kind, p.part, p.text] for place, p in found], len(packed)]
        for found, packed in blocks
    ]
    return (
        json.dumps(meta, ensure_ascii=False).encode("utf-8", "surrogatepass"),
        b"".join(packed for _found, packed in blocks),
    )


def _decode(meta: bytes, packed: bytes, lines: int) -> list[Block] | None:
    """A worker's answer, checked: ``None`` for anything but blocks of passages of lines
    ``0 .. lines - 1``, in order, whose packed texts are all of ``packed``."""
    try:
        rows = json.loads(meta.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(rows, list):
        return None
    blocks: list[Block] = []
    last = at = 0
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], list)):
            return None
        found, size = row
        if not (found and type(size) is int and 0 < size <= len(packed) - at):
            return None
        passages: list[tuple[int, Passage]] = []
        for item in found:
            if not (isinstance(item, list) and len(item) == 4):
                return None
            place, kind, part, text = item
            if not (
                type(place) is int
                and last <= place < lines
                and isinstance(kind, str)
                and kind in _KINDS
                and type(part) is int
                and part >= 0
                and isinstance(text, str)
            ):
                return None
            last = place
            passages.append((place, Passage(kind, text, part)))
        blocks.append((passages, packed[at : at + size]))
        at += size
    return blocks if at == len(packed) else None


# ---------------------------------------------------------------- the worker


def serve(source: IO[bytes], out: IO[bytes]) -> None:
    """Answer requests from ``source`` on ``out`` until ``source`` ends."""
    from sandmem.memory.views._transcripts import cut_blocks
    from sandmem.redaction import redact

    while True:
        withheld_data = _read_frame(source)
        lines_data = _read_frame(source)
        if withheld_data is None or lines_data is None:
            return
        withheld = frozenset(json.loads(withheld_data))
        lines = lines_data.split(b"\n") if lines_data else []
        meta, packed = _encode(cut_blocks(lines, redact, withheld))
        _write_frame(out, meta)
        _write_frame(out, packed)
        out.flush()


#: what a worker runs: the module path it is given, then ``main`` with the package it expects
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from sandmem.memory.views._passage_worker import main; main(sys.argv[2])"
)


def _package() -> str:
    """The folder of the sandmem package this module is part of."""
    return str(Path(__file__).resolve().parents[2])


def main(package: str) -> None:
    """A worker's life: answer requests until standard input ends; nothing at all when the
    sandmem it imported is not ``package`` (its parent's)."""
    if _package() != package:
        return
    serve(sys.stdin.buffer, sys.stdout.buffer)


# ---------------------------------------------------------------- the pool


class Pool:
    """Worker processes, and one thread each to talk to them: ``submit`` a file's lines and
    wait for what a worker made of them; ``close`` ends the workers."""

    def __init__(self, count: int) -> None:
        self._idle: queue.SimpleQueue[subprocess.Popen[bytes] | None] = queue.SimpleQueue()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._threads = ThreadPoolExecutor(max_workers=count, thread_name_prefix="passages")
        path = json.dumps([entry for entry in sys.path if entry])
        python = interpreter()
        for _ in range(count):
            try:
                if python is None:
                    raise OSError("sys.executable is not a Python interpreter")
                proc = subprocess.Popen(
                    [python, "-I", "-c", _BOOT, path, _package()],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as exc:
                logger.warning("index worker not started (%s): passages cut here", exc)
                self._idle.put(None)
                continue
            self._procs.append(proc)
            self._idle.put(proc)

    def submit(
        self, lines: Sequence[bytes], withheld: frozenset[str]
    ) -> Future[list[Block] | None]:
        """Have a worker cut and pack ``lines``: the future gives its blocks, or ``None`` (cut
        them here)."""
        data = b"\n".join(lines)
        if len(data) >= FRAME_BYTES:  # past what a frame carries: cut here
            done: Future[list[Block] | None] = Future()
            done.set_result(None)
            return done
        return self._threads.submit(self._blocks, data, sorted(withheld), len(lines))

    def _blocks(self, data: bytes, withheld: list[str], lines: int) -> list[Block] | None:
        answer = self._ask(data, withheld)
        blocks = None if answer is None else _decode(*answer, lines)
        if answer is not None and blocks is None:
            logger.warning("an index worker's answer did not read back: passages cut here")
        return blocks

    def _ask(self, data: bytes, withheld: list[str]) -> tuple[bytes, bytes] | None:
        proc = self._idle.get()
        if proc is None:  # a worker that failed: its place stays empty
            self._idle.put(None)
            return None
        try:
            assert proc.stdin is not None and proc.stdout is not None
            _write_frame(proc.stdin, json.dumps(withheld).encode())
            _write_frame(proc.stdin, data)
            proc.stdin.flush()
            meta = _read_frame(proc.stdout)
            packed = _read_frame(proc.stdout) if meta is not None else None
        except (OSError, ValueError):
            meta = packed = None
        if meta is None or packed is None:
            logger.warning("an index worker stopped: its passages are cut here")
            proc.kill()
            self._idle.put(None)
            return None
        self._idle.put(proc)
        return meta, packed

    def close(self) -> None:
        """End the workers (a worker stops when its standard input closes) and their pipes."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        for proc in self._procs:
            with contextlib.suppress(OSError):  # a worker that died: its pipe is broken
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
