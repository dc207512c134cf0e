"""The ``Shell`` capability: ``exec_command`` runs a shell command in the workspace."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sandmem._truncate import estimate_tokens, truncate_head_tail
from sandmem.agent._capability import Capability
from sandmem.agent._tools import FunctionTool, function_tool
from sandmem.redaction import redact

if TYPE_CHECKING:
    from sandmem.agent._context import SandboxRunContext
    from sandmem.sandboxes._session import ExecResult

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
#: output budget per call (4 bytes a token); longer output keeps its head and tail
DEFAULT_MAX_OUTPUT_TOKENS = 10_000
MAX_OUTPUT_TOKENS = 50_000

_DESCRIPTION = (
    "Run a shell command in the workspace and get its exit code and combined stdout/stderr. "
    "A relative workdir starts at your working directory (the default). timeout_ms defaults to "
    f"{DEFAULT_TIMEOUT_MS} (at most {MAX_TIMEOUT_MS}); the command is killed when it expires. "
    f"Output over max_output_tokens (default {DEFAULT_MAX_OUTPUT_TOKENS}, at most "
    f"{MAX_OUTPUT_TOKENS}) keeps only its beginning and end."
)


def _bounded(value: int | None, default: int, maximum: int, name: str) -> int:
    if value is None:
        return default
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return min(value, maximum)


def format_exec_result(
    result: ExecResult,
    *,
    timeout_ms: int,
    elapsed_s: float,
    max_output_tokens: int,
    notes: Sequence[str] = (),
) -> str:
    """Render an exec result for the model: status lines, then the (truncated) output."""
    if result.timed_out:
        lines = [f"Command timed out after {timeout_ms} ms and was killed."]
    else:
        lines = [f"Exit code: {result.exit_code}"]
    lines.append(f"Wall time: {elapsed_s:.1f} s")
    lines += [f"Note: {note}" for note in notes]
    if result.truncated:
        lines.append(
            "Note: the command printed more than the sandbox captures; its middle was dropped, "
            "so any sizes stated below count only the captured part."
        )
    output = result.output
    lines.append("Output:" if output else "Output: (none)")
    text = "\n".join(lines)
    if output:
        if estimate_tokens(output) > max_output_tokens:
            # redact before cutting: a cut could separate a secret from what identifies it
            # (a key's BEGIN line, a token's prefix), and the kept half would reach the rollout
            output = redact(output)
        text += "\n" + truncate_head_tail(output, max_output_tokens, what="output")
    return text


class Shell(Capability):
    """Gives the model ``exec_command(cmd, workdir, timeout_ms, max_output_tokens)``."""

    type = "shell"

    def tools(self) -> list[FunctionTool]:
        async def exec_command(
            cmd: str,
            workdir: str | None = None,
            timeout_ms: int | None = None,
            max_output_tokens: int | None = None,
        ) -> str:
            return await self._exec(cmd, workdir, timeout_ms, max_output_tokens)

        return [function_tool(description=_DESCRIPTION)(exec_command)]

    async def _exec(
        self,
        cmd: str,
        workdir: str | None,
        timeout_ms: int | None,
        max_output_tokens: int | None,
    ) -> str:
        timeout = _bounded(timeout_ms, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, "timeout_ms")
        budget = _bounded(
            max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS, "max_output_tokens"
        )
        started = time.monotonic()
        # sessions run a string under ``bash -c``: merge stderr into stdout so the model sees
        # both in the order they were written
        result = await self.session.exec(
            f"exec 2>&1; {cmd}",
            timeout=timeout / 1000,
            workdir=self.workspace_scope.anchor(workdir),
            raise_on_timeout=False,
        )
        notes = []
        if timeout_ms is not None and timeout_ms > MAX_TIMEOUT_MS:
            notes.append(f"timeout_ms is capped at {MAX_TIMEOUT_MS}.")
        if max_output_tokens is not None and max_output_tokens > MAX_OUTPUT_TOKENS:
            notes.append(f"max_output_tokens is capped at {MAX_OUTPUT_TOKENS}.")
        return format_exec_result(
            result,
            timeout_ms=timeout,
            elapsed_s=time.monotonic() - started,
            max_output_tokens=budget,
            notes=notes,
        )

    async def instructions(self, ctx: SandboxRunContext) -> str | None:
        return (
            "Run shell commands with `exec_command`; they start in your working directory unless "
            f"`workdir` is given and are killed after {DEFAULT_TIMEOUT_MS // 1000} s unless "
            "you pass a longer `timeout_ms`."
        )
