"""Running one command: its own process group, a hard timeout, and bounded output capture.

Output is read from pipes in 64 KiB chunks. Each stream keeps at most ``max_output_bytes``:
the first half and the last half of what the command wrote; what lies between is dropped as it
arrives (memory does not grow with a runaway command) and replaced by a marker stating how many
bytes were omitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandmem._truncate import snap_head, snap_tail
from sandmem.sandboxes._session import ExecResult

CHUNK_SIZE = 64 * 1024
#: exit code reported when the command was killed at its timeout (as coreutils ``timeout``)
TIMEOUT_EXIT_CODE = 124
#: after the command exits, how long to wait for pipes still held open by background processes
DRAIN_GRACE_SECONDS = 0.5
#: how long to wait for the killed command to be reaped
KILL_GRACE_SECONDS = 5.0
#: how long a cancelled call waits for the killed command to be reaped before it re-raises
CANCEL_GRACE_SECONDS = 1.0


class _Capture:
    """Head and tail of a byte stream, each at most half of ``limit``."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail and self._tail_len - len(self._tail[0]) >= self._tail_limit:
            self._tail_len -= len(self._tail.popleft())

    def result(self) -> tuple[bytes, bool]:
        """The captured bytes (with an omission marker when truncated) and whether truncated.

        When truncated, the head ends and the tail starts at a line break (or, failing one
        within ``SNAP_BYTES``, at a character that cannot be part of a token), so the cut
        never splits a secret in two: redaction later sees each one whole or not at all."""
        tail = b"".join(self._tail)[-self._tail_limit :]
        omitted = self.total - len(self._head) - len(tail)
        if omitted <= 0:
            return bytes(self._head) + tail, False
        head = snap_head(bytes(self._head))
        tail = snap_tail(tail)
        omitted = self.total - len(head) - len(tail)
        marker = (
            f"\n[... sandmem: {omitted} bytes omitted; the command wrote {self.total} bytes, "
            f"the first and last {self._head_limit + self._tail_limit} are kept ...]\n"
        ).encode()
        return head + marker + tail, True


class _PipeReader:
    """Reads a non-blocking pipe from the event loop into a ``_Capture`` until EOF."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, capture: _Capture) -> None:
        self._loop = loop
        self._fd = fd
        self._capture = capture
        self.eof: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            for _ in range(16):  # bounded work per callback keeps the loop responsive
                chunk = os.read(self._fd, CHUNK_SIZE)
                if not chunk:
                    self._finish()
                    return
                self._capture.feed(chunk)
        except BlockingIOError:
            return
        except OSError:
            self._finish()

    def _finish(self) -> None:
        self._loop.remove_reader(self._fd)
        if not self.eof.done():
            self.eof.set_result(None)

    def close(self) -> None:
        self._finish()


def kill_process_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _ExitWatch(asyncio.SubprocessProtocol):
    """Resolves ``exited`` once the event loop has seen the process exit."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float,
    max_output_bytes: int,
) -> ExecResult:
    """Run ``argv`` in a new session (process group) and capture bounded output.

    After ``time_limit`` seconds the whole process group gets SIGKILL and the result has
    ``timed_out=True`` and exit code 124. When the call itself is cancelled the group is killed
    too, and the kill is awaited briefly. Whatever happens, the subprocess transport is closed
    before this returns or raises: none is left for the garbage collector (whose
    ``ResourceWarning`` would otherwise surface in unrelated code, long after the loop ended).
    Raises ``OSError`` when the program cannot be started.
    """
    loop = asyncio.get_running_loop()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    readers: list[_PipeReader] = []
    transport: asyncio.SubprocessTransport | None = None
    try:
        try:
            transport, watch = await loop.subprocess_exec(
                lambda: _ExitWatch(loop),
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        finally:
            os.close(out_w)
            os.close(err_w)
        pid = transport.get_pid()
        out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
        readers = [_PipeReader(loop, out_r, out), _PipeReader(loop, err_r, err)]
        timed_out = False
        try:
            done, _ = await asyncio.wait({watch.exited}, timeout=time_limit)
            if not done:
                timed_out = True
                kill_process_group(pid)
                await asyncio.wait({watch.exited}, timeout=KILL_GRACE_SECONDS)
        except BaseException:
            kill_process_group(pid)
            await asyncio.wait({watch.exited}, timeout=CANCEL_GRACE_SECONDS)
            raise
        # background processes may still hold the pipes: give them a moment, then stop reading
        await asyncio.wait([r.eof for r in readers], timeout=DRAIN_GRACE_SECONDS)
        returncode = transport.get_returncode()
    finally:
        if transport is not None:
            transport.close()
        for reader in readers:
            reader.close()
        os.close(out_r)
        os.close(err_r)
    stdout, out_truncated = out.result()
    stderr, err_truncated = err.result()
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out or returncode is None else returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        truncated=out_truncated or err_truncated,
    )
