"""The demo's verdict: did run 1 do its task, was memory carried to run 2, did run 2 do its
task — three separate answers, each checked in the workspace or the request actually sent,
never inferred from what the agent said.

- run 1's task is done when ``format_invoice_total`` applies the tax (checked by calling it
  with values the workspace's own test does not use, so editing the test does not pass);
- memory is carried when run 2's first model request holds the memory prompt built from a
  non-empty ``memory_summary.md``;
- run 2's task is done when a new test file exists under ``tests/`` and the tests pass.

The exit status is 0 only when run 1 did its task *and* memory was carried: memory of a
failed fix is still memory, but the demo claims more than that. Run 2's result is reported,
not required (it measures the model, not the memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandmem._log_lines import human_size
from sandmem.demo._workspace import BUGGY_FILE, python_command
from sandmem.sandboxes import SandboxSession

#: how long each check may run (seconds)
CHECK_TIMEOUT_S = 120.0
_FIX_CHECK = (
    "import sys; sys.path.insert(0, 'src'); "
    "from acme_metrics.report import format_invoice_total as total; "
    "got = (total(80.0, 0.5), total(200.0, 0.1)); "
    "assert got == (120.0, 220.0), f'format_invoice_total(80.0, 0.5), (200.0, 0.1) gave {got}'"
)
#: the workspace's own test files (a new one is run 2's regression test)
SEED_TESTS = frozenset({"test_report.py"})


@dataclass(frozen=True)
class Check:
    """Whether a run did its task, and the evidence in one line."""

    done: bool
    detail: str


def _tail(output: bytes, limit: int = 160) -> str:
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines()]
    last = next((line for line in reversed(lines) if line), "(no output)")
    return last if len(last) <= limit else last[: limit - 1] + "…"


async def check_fix(session: SandboxSession) -> Check:
    """Run 1's task: the invoice total applies the tax rate."""
    result = await session.exec(
        python_command(), "-c", _FIX_CHECK, timeout=CHECK_TIMEOUT_S, raise_on_timeout=False
    )
    if result.ok():
        return Check(True, f"format_invoice_total in {BUGGY_FILE} now applies the tax rate")
    return Check(False, f"format_invoice_total is still wrong: {_tail(result.stderr)}")


async def check_regression_test(session: SandboxSession) -> Check:
    """Run 2's task: a new test file under ``tests/``, and the tests pass."""
    names = await session.listdir("tests") if await session.is_dir("tests") else []
    new = sorted(n for n in names if n.endswith(".py") and n not in SEED_TESTS)
    if not new:
        return Check(False, "no new test file under tests/")
    result = await session.exec(
        python_command(), "-m", "pytest", "-q", timeout=CHECK_TIMEOUT_S, raise_on_timeout=False
    )
    files = ", ".join(f"tests/{n}" for n in new)
    if result.ok():
        return Check(True, f"{files} added; the tests pass ({_tail(result.stdout)})")
    return Check(False, f"{files} added, but the tests fail ({_tail(result.stdout)})")


def verdict(
    run_1: Check, run_2: Check | None, summary: str, carried: bool, summary_bytes: int
) -> tuple[list[str], int]:
    """The verdict's lines and the exit status (0: run 1 did its task and memory was
    carried). ``summary_bytes`` is memory_summary.md's size on disk (``_files.size``), shown
    as the memory tree and ``sandmem memory status`` show it."""
    if not summary.strip():
        memory = "NO: memory_summary.md is empty, so run 2 had no memory to read"
    elif not carried:
        memory = (
            "NO: run 2's first model request did not carry the memory prompt with "
            "memory_summary.md in its instructions"
        )
    else:
        memory = (
            "YES: run 2's first model request carried run 1's memory (memory_summary.md inside "
            f"the memory prompt of its instructions, {human_size(summary_bytes)})"
        )
    lines = [
        f"Run 1 did its task (fix the bug): {'YES' if run_1.done else 'NO'}: {run_1.detail}",
        f"Memory carried to run 2: {memory}",
    ]
    if run_2 is not None:
        lines.append(
            f"Run 2 did its task (regression test): {'YES' if run_2.done else 'NO'}: {run_2.detail}"
        )
    ok = run_1.done and carried and bool(summary.strip())
    if ok:
        lines.append("OK: run 1 fixed the bug and run 2 started with its memory.")
    elif carried and summary.strip():
        lines.append(
            "FAILED: memory was carried, but run 1 did not do its task (the model could not "
            "fix the bug), so what run 2 remembered is a failed attempt."
        )
    else:
        lines.append("FAILED: run 2 did not start with run 1's memory.")
    return lines, 0 if ok else 1
