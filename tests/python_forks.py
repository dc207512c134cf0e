"""Python programs run as ``python -c CODE`` or ``python SCRIPT ARGS`` would run them, without
paying the interpreter's start and sandmem's imports (about 1 s of CPU, most of it the
``openai`` package's types) for each one: a server process imports them once, then forks a
child per program. The child gets the program's own working directory, environment,
``sys.argv``, ``sys.path[0]`` and a fresh ``__main__`` module, writes to its own stdout and
stderr files, and ends through the interpreter's normal shutdown (``atexit`` handlers run),
so its exit code is the program's. What differs from a new process: the modules the server
imported are already there (imported once, with the server's environment; sandmem reads no
environment variable at import), so use it for programs whose subject is what they print
and exit with (doc blocks, examples), never for start-up, import or signal behaviour.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_SERVER = r"""
import importlib, json, os, runpy, sys, traceback, types

for name in sys.argv[1:]:
    importlib.import_module(name)
requests, replies = sys.stdin, os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing the server imported writes on replies


def child(req):
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = list(req["argv"])
    if req["script"] is None:
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        main.__builtins__ = __builtins__
        sys.modules["__main__"] = main
        exec(compile(req["code"], "<string>", "exec"), main.__dict__)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(req["script"]))
        runpy.run_path(req["script"], run_name="__main__")


for line in requests:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        replies.close()
        del requests
        try:
            child(req)
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            raise SystemExit(1)
        raise SystemExit(0)
    replies.write(json.dumps(pid) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    replies.flush()
"""


class PythonForks:
    """A started fork server that has imported ``preload``; ``run`` is its
    ``subprocess.run``, one program at a time."""

    def __init__(self, preload: tuple[str, ...], workdir: Path) -> None:
        self.workdir = workdir
        self._count = 0
        self._lock = threading.Lock()
        self._replies = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )

    def run(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` is ``[sys.executable, "-c", CODE]`` or ``[sys.executable, SCRIPT, *ARGS]``."""
        if len(argv) >= 3 and argv[1] == "-c":
            request: dict[str, Any] = {"script": None, "code": argv[2], "argv": ["-c", *argv[3:]]}
        else:
            request = {"script": argv[1], "code": None, "argv": argv[1:]}
        with self._lock:
            self._count += 1
            out = self.workdir / f"{self._count}.out"
            err = self.workdir / f"{self._count}.err"
            request.update(cwd=str(cwd), env=env, stdout=str(out), stderr=str(err))
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            pid = int(self._reply(60.0))
            try:
                returncode = int(self._reply(timeout))
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)  # the server reaps it and goes on
                self._reply(60.0)
                raise
        return subprocess.CompletedProcess(
            argv, returncode, out.read_text(errors="replace"), err.read_text(errors="replace")
        )

    def _reply(self, timeout: float) -> bytes:
        """The server's next reply line, or ``TimeoutExpired`` after ``timeout`` seconds."""
        assert self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._proc.stdout], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self._proc.args, timeout)
            data = os.read(self._proc.stdout.fileno(), 4096)
            if not data:
                raise RuntimeError("the fork server ended")
            self._replies += data
        line, self._replies = self._replies.split(b"\n", 1)
        return line

    def close(self) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
