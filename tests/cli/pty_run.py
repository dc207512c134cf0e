"""A command in a pseudo-terminal, as a user at a terminal runs it: its output is read as it
comes, and Ctrl-C is the byte 0x03 typed on the terminal (the terminal driver turns it into
SIGINT for the foreground process group, exactly as for a user). Deadlines are generous and
nothing is timed: a loaded machine only makes a test slower."""

from __future__ import annotations

import fcntl
import os
import re
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
DEADLINE_S = 90.0


def _controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyCommand:
    """``sandmem ARGS`` with its stdin, stdout and stderr on one pseudo-terminal."""

    def __init__(self, *args: str | Path, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [SANDMEM, *map(str, args)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            start_new_session=True,
            preexec_fn=_controlling_terminal,  # the terminal must be the child's own
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.output = ""

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            return False
        if not chunk:
            return False
        self.output += chunk.decode("utf-8", "replace").replace("\r\n", "\n")
        return True

    def expect(self, pattern: str, timeout: float = DEADLINE_S) -> re.Match[str]:
        """Wait until the output matches ``pattern`` (a regular expression)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.output)
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.5)):
                if (found := re.search(pattern, self.output)) is not None:
                    return found
                raise AssertionError(f"no {pattern!r} in the output:\n{self.output}")

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout: float = DEADLINE_S) -> int:
        """The exit status, reading the output meanwhile (a full terminal would block it)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        code = self.proc.poll()
        while select.select([self.master], [], [], 0.1)[0] and self._read(0):
            pass  # what it printed last
        if code is None:
            raise AssertionError(f"still running after {timeout} s:\n{self.output}")
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        os.close(self.master)

    def __enter__(self) -> PtyCommand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
