"""Issue 39: ``sandmem worker`` at a terminal prints one start line saying what it serves and
how to stop it, and the first Ctrl-C stops it with exit status 130 after saying what was done
(driven in a pseudo-terminal, against the suite's real Redis and S3 servers)."""

from __future__ import annotations

import sys
from pathlib import Path

from services import RedisServer, S3Server

sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
from pty_run import PtyCommand


def test_worker_start_line_and_ctrl_c(redis_server: RedisServer, s3_server: S3Server) -> None:
    args = [
        "worker",
        "--broker",
        redis_server.url,
        "--store",
        f"s3://{s3_server.bucket}/terminal",
        "--endpoint-url",
        s3_server.endpoint_url,
        "--engine",
        "extractive",
        "--queue",
        "terminal-test",
    ]
    with PtyCommand(*args, env={"SANDMEM_WORKER_LOGLEVEL": "INFO"}) as cmd:
        line = cmd.expect(r"sandmem worker (\S+): jobs from .*\n")
        assert "Ctrl-C or SIGTERM lets running jobs finish (up to 10 s" in line.group(0)
        cmd.expect(r"sandmem worker \S+ ready\.")
        cmd.ctrl_c()
        cmd.expect(r"stopping; 0 running job\(s\) finish first")
        # the wind-down is bounded (stop_grace_s, then _SETTLE_S for the chores): the exit
        # follows within seconds however loaded the machine
        cmd.expect(r"stopped \(SIGINT\): 0 job\(s\) done")
        assert cmd.wait() == 130
        assert "Traceback" not in cmd.output
