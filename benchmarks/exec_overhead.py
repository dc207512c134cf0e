"""Per-command overhead of the sandbox backends against a bare ``subprocess.run``.

Each round times ``CALLS`` sequential runs of ``true``: a bare ``subprocess.run``, ``exec`` on a
``UnixLocalSandboxClient`` session, and ``exec`` on a ``BubblewrapSandboxClient`` session (when
bwrap can run here). The figure per backend is the median over ``ROUNDS`` rounds of the mean
time per call, in milliseconds; the overhead column subtracts the bare subprocess's figure.

    python benchmarks/exec_overhead.py               # a markdown table
    python benchmarks/exec_overhead.py --json        # the numbers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sandmem.sandboxes import SandboxSession, UnixLocalSandboxClient
from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
from sandmem.sandboxes._bwrap_host import probe_bwrap

CALLS = 50
ROUNDS = 7
_TRUE = shutil.which("true") or "/bin/true"


def _bare_round(calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        subprocess.run([_TRUE], check=True, timeout=30)
    return (time.perf_counter() - start) / calls * 1000


async def _exec_round(session: SandboxSession, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        result = await session.exec(["true"], timeout=30)
        if result.exit_code != 0:
            raise RuntimeError(f"`true` failed in the sandbox: {result.output}")
    return (time.perf_counter() - start) / calls * 1000


async def _backend_rounds(
    make_client: Callable[[], UnixLocalSandboxClient], calls: int, rounds: int
) -> list[float]:
    client = make_client()
    session = await client.create()
    try:
        async with session:
            await _exec_round(session, 3)  # warm up (probe, page cache)
            return [await _exec_round(session, calls) for _ in range(rounds)]
    finally:
        await client.delete(session)


def _summary(per_call_ms: list[float], baseline: float | None) -> dict[str, Any]:
    median = statistics.median(per_call_ms)
    return {
        "median_ms": round(median, 3),
        "overhead_ms": None if baseline is None else round(median - baseline, 3),
        "rounds_ms": [round(x, 3) for x in per_call_ms],
    }


def measure(calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Median milliseconds per call of each way to run ``true``, and the overhead of each over
    a bare ``subprocess.run``. ``bubblewrap`` is ``None`` (with ``bubblewrap_skipped`` giving
    the reason) when bwrap cannot run on this host."""
    _bare_round(3)
    bare = statistics.median(_bare_round(calls) for _ in range(rounds))
    results: dict[str, Any] = {
        "calls_per_round": calls,
        "rounds": rounds,
        "subprocess": _summary([bare], None) | {"overhead_ms": 0.0},
    }
    local = asyncio.run(_backend_rounds(UnixLocalSandboxClient, calls, rounds))
    results["unix_local"] = _summary(local, bare)
    probe = probe_bwrap()
    if probe.error is None:
        bwrap = asyncio.run(_backend_rounds(BubblewrapSandboxClient, calls, rounds))
        results["bubblewrap"] = _summary(bwrap, bare)
    else:
        results["bubblewrap"] = None
        results["bubblewrap_skipped"] = probe.error
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Per-command cost of running `true` (median of {results['rounds']} rounds of "
        f"{results['calls_per_round']} sequential calls):",
        "",
        "| how | ms per call | overhead vs bare subprocess (ms) |",
        "| --- | ---: | ---: |",
    ]
    labels = {
        "subprocess": "bare `subprocess.run`",
        "unix_local": "`UnixLocalSandboxClient` exec",
        "bubblewrap": "`BubblewrapSandboxClient` exec",
    }
    for key, label in labels.items():
        row = results.get(key)
        if row is None:
            lines.append(f"| {label} | skipped | {results.get(f'{key}_skipped', '')} |")
        else:
            lines.append(f"| {label} | {row['median_ms']:.2f} | {row['overhead_ms']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds (at least 5)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 5 or args.calls < 1:
        parser.error("--rounds must be at least 5 and --calls at least 1")
    with tempfile.TemporaryDirectory(prefix="sandmem-bench-") as tmp:
        tempfile.tempdir = tmp  # workspaces go here and are removed with it
        try:
            results = measure(args.calls, args.rounds)
        finally:
            tempfile.tempdir = None
    print(json.dumps(results, indent=2) if args.json else markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
