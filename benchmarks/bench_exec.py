"""Figure 7: the cost of running a command in a sandbox vs a bare ``subprocess.run``.

Two tables. The first comes from ``benchmarks/exec_overhead.py`` (owned by the sandbox
backends): ``session.exec(["true"])`` on each backend against ``subprocess.run(["true"])``. The
second is the round trip the model actually pays: the ``Shell`` capability's ``exec_command``
tool invoked with ``{"cmd": "true"}`` (argument validation, ``bash -c`` in the sandbox, result
formatting), against a bare ``subprocess.run(["bash", "-c", "true"])``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Any

import exec_overhead
from bench_common import Figure, median, table

from sandmem.capabilities import Shell
from sandmem.sandboxes import UnixLocalSandboxClient
from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import probe_bwrap

CALLS = 50
ROUNDS = 7
_BASH = shutil.which("bash") or "/bin/bash"


def _bare_bash_round(calls: int, timeout: float | None) -> float:
    """Mean milliseconds of ``subprocess.run(["bash", "-c", "true"], timeout=timeout)``.

    Without a timeout ``subprocess`` blocks in ``waitpid``; with one it polls ``waitpid``
    with growing sleeps (0.5 ms, 1 ms, 2 ms ...), which adds up to ~2 ms to a short command.
    The baseline is measured both ways so the table shows that cost separately.
    """
    started = time.perf_counter()
    for _ in range(calls):
        subprocess.run([_BASH, "-c", "true"], check=True, timeout=timeout)
    return (time.perf_counter() - started) / calls * 1000


async def _tool_round(tool: Any, calls: int) -> float:
    """Mean milliseconds of one ``exec_command`` tool call running ``true``."""
    started = time.perf_counter()
    for _ in range(calls):
        output = await tool.on_invoke('{"cmd": "true"}')
        if not str(output).startswith("Exit code: 0"):
            raise RuntimeError(f"exec_command true failed: {output}")
    return (time.perf_counter() - started) / calls * 1000


async def _measure_tool(calls: int, rounds: int, bwrap: bool) -> dict[str, list[float]]:
    """Rounds of each variant, interleaved so that load from other processes on the machine
    falls on all of them alike; round 0 is a warm-up."""
    clients: dict[str, UnixLocalSandboxClient] = {"unix_local": UnixLocalSandboxClient()}
    if bwrap:
        clients["bubblewrap"] = BubblewrapSandboxClient()
    sessions = {name: await client.create() for name, client in clients.items()}
    samples: dict[str, list[float]] = {
        "bare_bash": [],
        "bare_bash_timeout": [],
        **{name: [] for name in clients},
    }
    try:
        tools = {}
        for name, session in sessions.items():
            await session.start()
            (tools[name],) = Shell().bind(session).tools()
        for index in range(rounds + 1):
            timed = {
                "bare_bash": await asyncio.to_thread(_bare_bash_round, calls, None),
                "bare_bash_timeout": await asyncio.to_thread(_bare_bash_round, calls, 30.0),
            }
            for name, tool in tools.items():
                timed[name] = await _tool_round(tool, calls)
            if index:
                for name, value in timed.items():
                    samples[name].append(value)
    finally:
        for name, session in sessions.items():
            await clients[name].delete(session)
    return samples


def measure_tool(calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Median ms per call: bare ``bash -c true``, and ``exec_command`` on each backend
    (``bubblewrap`` is ``None``, with the reason in ``skip``, when bwrap cannot run here)."""
    probe = probe_bwrap()
    samples = asyncio.run(_measure_tool(calls, rounds, probe.error is None))
    result: dict[str, Any] = {name: median(values) for name, values in samples.items()}
    result.setdefault("bubblewrap", None)
    result["skip"] = probe.error
    return result


def run(calls: int = CALLS, rounds: int = ROUNDS) -> Figure:
    backends = exec_overhead.measure(calls, rounds)
    tool = measure_tool(calls, rounds)
    bare = tool["bare_bash"]
    rows: list[list[object]] = [
        ['bare `subprocess.run(["bash", "-c", "true"])`', bare, 0.0],
        ["the same with `timeout=30`", tool["bare_bash_timeout"], tool["bare_bash_timeout"] - bare],
        [
            "`exec_command` tool, `UnixLocalSandboxClient`",
            tool["unix_local"],
            tool["unix_local"] - bare,
        ],
    ]
    if tool["bubblewrap"] is None:
        rows.append(["`exec_command` tool, `BubblewrapSandboxClient`", "skipped", tool["skip"]])
    else:
        bwrap = tool["bubblewrap"]
        rows.append(["`exec_command` tool, `BubblewrapSandboxClient`", bwrap, bwrap - bare])
    body = (
        exec_overhead.markdown(backends)
        + "\n\nThe model's round trip: the `exec_command` tool (`Shell` capability, "
        '`on_invoke(\'{"cmd": "true"}\')`: argument validation, `bash -c` in the sandbox, '
        f"the formatted result), median of {rounds} rounds of {calls} sequential calls:\n\n"
        + table(["how", "ms per call", "overhead vs bare bash (ms)"], rows)
    )
    meaning = _local_meaning(backends) + (
        " Against the blocking bare `bash -c true`, the whole `exec_command` round trip on the "
        f"local backend costs {tool['unix_local'] - bare:.2f} ms more (path checks, a minimal "
        "environment, an asyncio subprocess with bounded capture, argument validation and "
        "result formatting); the bare call with `timeout=30` costs "
        f"{tool['bare_bash_timeout'] - bare:.2f} ms more than without. " + _bwrap_meaning(backends)
    )
    return Figure(
        "exec",
        7,
        "exec_command round trip: local and bubblewrap vs bare subprocess.run",
        body,
        meaning,
        None,
        {"backends": backends, "tool": tool},
    )


def _local_meaning(backends: dict[str, Any]) -> str:
    local, bare = backends.get("unix_local"), backends.get("subprocess")
    if local is None or bare is None:
        return "The local backend was not measured."
    diff = local["median_ms"] - bare["median_ms"]
    relation = "more" if diff >= 0 else "less"
    return (
        f"In the first table a local `exec` took {local['median_ms']:.2f} ms, "
        f"{abs(diff):.2f} ms {relation} than the bare `subprocess.run` "
        f"({bare['median_ms']:.2f} ms)."
    )


def _bwrap_meaning(backends: dict[str, Any]) -> str:
    row = backends.get("bubblewrap")
    if row is None:
        return f"Bubblewrap was skipped here: {backends.get('bubblewrap_skipped')}."
    return (
        f"Bubblewrap's `exec` costs {row['overhead_ms']:.2f} ms more per command than the bare "
        "call: it builds the sandbox's namespaces and mounts on every call and applies the "
        "backend's limits."
    )
