"""Issue 39 item 10: with ``SANDMEM_WORKER_LOGLEVEL=INFO`` the worker's own INFO lines (one per
job) reach its log. The CLI's one-line warnings take sandmem's logger off the root logger;
the worker puts it back, so its records are written once, with a time, redacted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SECRET = "sk-proj-" + "W9" * 20

CODE = textwrap.dedent(
    f"""
    import logging
    from sandmem._log_lines import readable_warnings
    from sandmem.cli._worker_cmd import _log_to_stderr

    with readable_warnings():  # as inside every sandmem command
        _log_to_stderr(LEVEL)
        job = logging.getLogger("sandmem.distributed._worker")
        job.info("job for %s done: %s", "acme/memories", "2 extracted")
        job.debug("a debug line")
        logging.getLogger("sandmem.memory").warning("server said: key {SECRET} refused")
    """
)


def _stderr(level: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CODE.replace("LEVEL", repr(level))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_info_lines_reach_the_worker_log() -> None:
    err = _stderr("INFO")
    lines = err.splitlines()
    assert any(
        "INFO sandmem.distributed._worker: job for acme/memories done: 2 extracted" in line
        for line in lines
    ), err
    assert "a debug line" not in err
    warned = [line for line in lines if "server said" in line]
    assert len(warned) == 1 and "WARNING sandmem.memory" in warned[0]  # once, not twice
    assert SECRET not in err


def test_the_default_level_keeps_info_out() -> None:
    err = _stderr("WARNING")
    assert "job for" not in err and "server said" in err and SECRET not in err


def test_a_worker_that_cannot_reach_its_broker_says_so_in_one_line() -> None:
    import socket
    from pathlib import Path

    import pytest

    pytest.importorskip("redis")
    pytest.importorskip("boto3")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sandmem = str(Path(sys.executable).with_name("sandmem"))
    done = subprocess.run(
        [
            sandmem,
            "worker",
            "--broker",
            f"redis://:pw-{SECRET}@127.0.0.1:{port}/0",
            "--store",
            "s3://bucket/prefix",
            "--endpoint-url",
            f"http://127.0.0.1:{port}",
            "--engine",
            "extractive",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "the worker could not start" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr
