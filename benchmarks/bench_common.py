"""Shared helpers of the benchmark scripts: timing, workspaces, Markdown, the machine line.

Every figure module exposes ``run(...) -> Figure`` with keyword arguments for its sizes, so
``benchmarks/run.py`` runs it with the sizes of the report and the smoke test
(``tests/test_benchmarks_smoke.py``) runs it with tiny ones. Nothing here asserts a timing.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = ROOT / "tests"
CORPUS_DIR = TESTS_DIR / "data" / "rollouts"


@dataclass
class Figure:
    """One figure of ``BENCHMARKS.md``.

    ``body`` is Markdown (tables, short notes on method); ``meaning`` explains the numbers;
    ``status`` is the Done-when verdict (``None`` when the figure has no target); ``data`` holds
    the raw numbers for callers such as the smoke test.
    """

    key: str
    number: int
    title: str
    body: str
    meaning: str
    status: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def command(self) -> str:
        return f"python benchmarks/run.py --only {self.key}"

    def markdown(self) -> str:
        parts = [
            f"## Figure {self.number}: {self.title}",
            "",
            f"Reproduce: `{self.command}`",
            "",
            self.body.strip(),
            "",
            "**What the numbers mean.** " + self.meaning.strip(),
        ]
        if self.status is not None:
            parts += ["", "**Done-when.** " + self.status.strip()]
        return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- numbers


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def ms(seconds: float) -> str:
    """Seconds as milliseconds with precision that suits the size."""
    value = seconds * 1000
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.2f} s"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (numbers right-aligned)."""

    def align(column: int) -> str:
        values = [row[column] for row in rows]
        numeric = values and all(isinstance(v, int | float) for v in values)
        return "---:" if numeric else "---"

    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(align(i) for i in range(len(headers))) + " |",
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


async def time_async(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    """Wall-clock seconds of ``repeat`` sequential calls of ``fn``."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - started)
    return samples


# ---------------------------------------------------------------- workspaces


@contextlib.asynccontextmanager
async def workspace() -> AsyncIterator[SandboxSession]:
    """A started local sandbox session in a fresh temporary workspace.

    It is discarded with ``client.delete`` (no pre-stop hooks), so a generation manager
    registered during a benchmark never runs a flush that the benchmark did not time.
    """
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest())
    try:
        await session.start()
        yield session
    finally:
        await client.delete(session)


def fake_openai() -> ModuleType:
    """``tests/fake_openai.py``, the local OpenAI-compatible server of the test suite."""
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    return importlib.import_module("fake_openai")


def fake_server(handler: Callable[[Any], Any]) -> Any:
    """The test suite's ``FakeOpenAIServer`` (not started); it has a listen backlog of 128,
    like a real model server, so a burst of concurrent requests is not delayed by dropped
    connections."""
    return fake_openai().FakeOpenAIServer(handler)


def corpus() -> dict[str, str]:
    """The committed rollout corpus: rollout id (file stem) -> file text."""
    return {
        p.stem: p.read_bytes().decode("utf-8", "replace")
        for p in sorted(CORPUS_DIR.glob("*.jsonl"))
    }


# ---------------------------------------------------------------- the machine


def machine_line() -> str:
    """CPU model, cores, Python version and OS of this machine, on one line."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    os_name = platform.system()
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{os_name} (kernel {platform.release()})"
    )


def load_line() -> str:
    """The 1/5/15-minute load averages (other work on the machine adds noise)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "Load average: unknown"
    return f"Load average at start: {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min)"
