"""Compact rendering of a rollout file for the phase-one model.

Raw rollout JSON spends most of the phase-one budget on escaping, call ids, repeated tool output
and payloads the model cannot read. :func:`render_rollout` writes a numbered transcript instead:
a header per segment, then ``[3] user: ...``, ``[4] call exec_command: pytest -q``,
``[5] output (exit 1): ...``, ``[6] call apply_patch: update src/app.py`` and so on.

Kept in full (until the overall cap): every user message, each segment's final answer and
``final_output``, exceptions, exit codes, exec commands and the paths of patch headers. Tool output
over the per-item budget keeps its head and tail lines plus error-like lines from the middle; an
output identical to an earlier one becomes ``(same output as step N)``; base64 and binary payloads
become a size note; history a session replays becomes a pointer to the steps it repeats. The whole
text is then capped at ``max_tokens`` (head + tail, with a marker). Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from sandmem._items import Item, item_kind, message_text
from sandmem._truncate import BYTES_PER_TOKEN, truncate_head_tail
from sandmem.memory._json import loads_bounded
from sandmem.memory._render_text import (
    binary_share,
    bound_text,
    clean_terminal,
    nbytes,
    scrub_payloads,
)
from sandmem.memory.rollouts import (
    ParsedRollout,
    RolloutSegment,
    exception_text,
    keep_item,
    parse_rollout,
    strip_encrypted,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_PER_ITEM_TOKENS",
    "ParsedRollout",
    "RolloutSegment",
    "parse_rollout",
    "render_rollout",
    "rollout_terminal_summary",
]

DEFAULT_PER_ITEM_TOKENS = 1_000
DEFAULT_MAX_TOKENS = 150_000

_CALL_KINDS = ("function_call", "custom_tool_call")
_OUTPUT_KINDS = ("function_call_output", "custom_tool_call_output")

_PATCH_HEADER = re.compile(r"^\*\*\* (Add File|Update File|Delete File|Move to): (.+?)\s*$", re.M)
# status lines an exec tool prints before the output: `exit_code: 1` (or `Exit code: 1`),
# `Wall time: 0.4 s`, `Output:`; notes and timeout messages among them are kept
_STATUS_LINE = re.compile(
    r"^\s*(?:(?:exit[_ ]code|exit status|process exited with code)\s*[:=]?\s*(?P<code>-?\d+)"
    r"|wall time:.*|(?P<output>output:)\s*(?:\(none\))?)\s*$",
    re.I,
)
_KEPT_STATUS = ("Note: ", "Command timed out")


def rollout_terminal_summary(parsed: ParsedRollout) -> dict[str, Any]:
    """What phase one sends beside the transcript: segment count, the last segment's terminal
    metadata and ``updated_at``, and the terminal state of every segment in order."""
    last = parsed.segments[-1] if parsed.segments else None
    return {
        "segment_count": len(parsed.segments),
        "terminal_metadata": dict(last.terminal_metadata) if last else {},
        "terminal_states": [s.terminal_state for s in parsed.segments],
        "updated_at": last.updated_at if last else None,
        "malformed_lines": parsed.malformed_lines,
    }


def render_rollout(
    parsed: ParsedRollout,
    *,
    per_item_tokens: int = DEFAULT_PER_ITEM_TOKENS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> str:
    """The compact transcript of ``parsed`` (see the module docstring), at most ``max_tokens``
    (4 bytes a token) plus the omission marker."""
    if per_item_tokens <= 0 or max_tokens <= 0:
        raise ValueError("per_item_tokens and max_tokens must be positive")
    renderer = _Renderer(per_item_tokens * BYTES_PER_TOKEN)
    blocks = [_rollout_header(parsed)]
    for number, segment in enumerate(parsed.segments, start=1):
        blocks.extend(renderer.segment(segment, number, len(parsed.segments)))
    return truncate_head_tail("\n".join(blocks) + "\n", max_tokens, what="rollout transcript")


# --- rendering -----------------------------------------------------------------------------


class _Renderer:
    """Renders segments in order, numbering steps across the whole rollout and remembering
    calls, outputs and items already shown."""

    def __init__(self, budget: int) -> None:
        self.budget = budget  # bytes per item
        self.step = 0
        self.calls: dict[str, int] = {}  # call_id -> step of the call
        self.outputs: dict[str, int] = {}  # exit code and output body -> first step
        self.items: dict[str, int] = {}  # canonical item JSON -> first step

    def segment(self, segment: RolloutSegment, number: int, total: int) -> list[str]:
        blocks = [_segment_header(segment, number, total)]
        items = segment.input
        replayed = self._replayed_prefix(items)
        if replayed:
            blocks.append(
                f"(input replays {len(replayed)} earlier items as history: "
                f"steps {replayed[0]}-{replayed[-1]})"
            )
            items = items[len(replayed) :]
        final_index = _final_answer_index(segment.generated_items)
        final_label = "final answer" if segment.terminal_state == "completed" else "last message"
        final_step: int | None = None
        for index, item in enumerate([*items, *segment.generated_items]):
            is_final = final_index >= 0 and index - len(items) == final_index
            block = self.item(item, final_label if is_final else None)
            if block is not None:
                blocks.append(block)
                final_step = self.step if is_final else final_step
        blocks.extend(self._footer(segment, final_index, final_step))
        return blocks

    def item(self, item: Item, final_label: str | None = None) -> str | None:
        """One item's block; ``final_label`` marks a segment's last assistant message, which is
        kept in full."""
        kind = item_kind(item)
        role = str(item.get("role") or "unknown")
        if not keep_item(item):  # also for rollouts recorded before the filter
            return None
        item = strip_encrypted(item)
        self.step += 1
        self.items.setdefault(_compact(item), self.step)
        if kind == "message":
            label = f"{role} ({final_label})" if final_label else role
            text = _content_text(item.get("content"))
            if role != "user" and not final_label:
                text = bound_text(text, 2 * self.budget, "message")
            return _block(self.step, label, text)
        if kind in _CALL_KINDS:
            return self._call(item)
        if kind in _OUTPUT_KINDS:
            return self._output(item)
        return _block(self.step, kind, bound_text(_compact(item), self.budget, kind))

    def _replayed_prefix(self, items: list[Item]) -> list[int]:
        """Steps repeated, in order, by the leading items of a segment's input (a session
        replaying history). The last input item, the new turn, is never treated as replay."""
        steps: list[int] = []
        for item in items[:-1]:
            step = self.items.get(_compact(item))
            if step is None or (steps and step <= steps[-1]):
                break
            steps.append(step)
        return steps if len(steps) >= 2 else []

    def _call(self, item: Item) -> str:
        name = str(item.get("name") or "unknown_tool")
        self.calls[str(item.get("call_id"))] = self.step
        args = _parse_json(item.get("arguments", item.get("input")))
        if name == "exec_command" and isinstance(args, dict) and "cmd" in args:
            cmd = args["cmd"]
            cmd_text = shlex.join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)
            workdir = args.get("workdir")
            label = f"call exec_command (workdir {workdir})" if workdir else "call exec_command"
            return _block(self.step, label, scrub_payloads(cmd_text))
        if name == "apply_patch":
            patch = args.get("patch", args.get("input")) if isinstance(args, dict) else args
            return self._patch(patch if isinstance(patch, str) else _compact(patch))
        return _block(
            self.step, f"call {name}", bound_text(_args_text(args), self.budget, "arguments")
        )

    def _patch(self, patch: str) -> str:
        ops = [
            f"{verb.lower().removesuffix(' file')} {path}"
            for verb, path in _PATCH_HEADER.findall(patch)
        ]
        summary = "; ".join(ops) or "(no file headers)"
        excerpt = bound_text(patch.rstrip(), self.budget, "patch")
        return f"[{self.step}] call apply_patch: {summary}\n{excerpt}"

    def _output(self, item: Item) -> str:
        raw = item.get("output")
        text = raw if isinstance(raw, str) else _content_text(raw)
        code, body = _split_status(text)
        call_step = self.calls.get(str(item.get("call_id")))
        label = "output" if call_step in (None, self.step - 1) else f"output of step {call_step}"
        if code is not None:
            label += f" (exit {code})"
        first = self.outputs.setdefault(f"{code}\n{body}", self.step)
        if first != self.step and len(body) > 40:
            return _block(self.step, label, f"(same output as step {first})")
        body = clean_terminal(body).rstrip()
        if len(body) >= 64 and binary_share(body) > 0.1:
            body = f"[binary data, {nbytes(body)} bytes omitted]"
        body = bound_text(body, self.budget, "output")
        return _block(self.step, label, body if body.strip() else "(no output)")

    def _footer(
        self, segment: RolloutSegment, final_index: int, final_step: int | None
    ) -> list[str]:
        lines: list[str] = []
        if segment.final_output is not None:
            value = segment.final_output
            text = value if isinstance(value, str) else _compact(value)
            final_text = message_text(segment.generated_items[final_index]) if final_step else ""
            if final_step is not None and text.strip() == final_text.strip():
                text = f"(same as step {final_step})"
            lines.append(_block(None, "final_output", scrub_payloads(text)))
        if segment.interruptions:
            text = bound_text(_compact(segment.interruptions), self.budget, "interruptions")
            lines.append(_block(None, "interruptions (awaiting approval)", text))
        return lines


def _rollout_header(parsed: ParsedRollout) -> str:
    keys = {s.conversation_key for s in parsed.segments if s.conversation_key}
    header = f"rollout {parsed.rollout_id or 'unknown'}"
    if keys:
        header += f" (conversation {', '.join(sorted(keys))})"
    header += f": {len(parsed.segments)} segment(s)"
    if parsed.malformed_lines:
        header += f"; {parsed.malformed_lines} malformed line(s) skipped"
    return header


def _segment_header(segment: RolloutSegment, number: int, total: int) -> str:
    header = (
        f"\n=== segment {number} of {total} | updated_at {segment.updated_at or 'unknown'} "
        f"| terminal_state {segment.terminal_state} ==="
    )
    source = segment.source
    if source:
        described = [f"{source.get('format') or 'unknown'} session {source.get('session_id')}"]
        described += [
            f"{label} {source[key]}"
            for key, label in (("cwd", "cwd"), ("started_at", "started"), ("title", "title"))
            if isinstance(source.get(key), str) and source[key]
        ]
        header += "\ningested from " + " | ".join(described)
    error = exception_text(segment.terminal_metadata)
    if error:
        header += f"\nexception: {error}"
    return header


def _final_answer_index(items: list[Item]) -> int:
    found = [
        i
        for i, it in enumerate(items)
        if item_kind(it) == "message" and it.get("role") == "assistant"
    ]
    return found[-1] if found else -1


def _block(step: int | None, label: str, body: str) -> str:
    head = f"[{step}] {label}:" if step is not None else f"{label}:"
    return f"{head}\n{body}" if "\n" in body else f"{head} {body}"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return scrub_payloads(content)
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return "" if content is None else scrub_payloads(_compact(content))


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return scrub_payloads(part)
    if not isinstance(part, dict):
        return scrub_payloads(_compact(part))
    for key, prefix in (("text", ""), ("refusal", "refusal: ")):
        if isinstance(part.get(key), str):
            return prefix + scrub_payloads(part[key])
    kind = str(part.get("type") or "part")
    if "image" in kind or "file" in kind:
        source = part.get("image_url") or part.get("file_data") or part.get("file_url")
        name = part.get("filename") or part.get("file_id") or ""
        note = " ".join(str(x) for x in (name, source or "") if x)
        return f"[{kind}: {scrub_payloads(note) or 'no data'}]"
    return scrub_payloads(_compact(part))


def _args_text(args: Any) -> str:
    if isinstance(args, dict):
        return ", ".join(
            f"{key}={value if isinstance(value, str) else _compact(value)}"
            for key, value in args.items()
        )
    return args if isinstance(args, str) else _compact(args)


def _split_status(text: str) -> tuple[int | None, str]:
    """The exit code and the body of a tool output whose first lines may be exec status lines
    (see ``_STATUS_LINE``); the wall time, which differs between identical runs, is dropped."""
    code: int | None = None
    kept: list[str] = []
    lines = text.split("\n", 6)
    start = 0
    for index, line in enumerate(lines[:6]):
        match = _STATUS_LINE.match(line)
        if match is None and not line.startswith(_KEPT_STATUS):
            break
        start = index + 1
        if match is None:
            kept.append(line)
        elif match["code"] is not None:
            code = int(match["code"])
        elif match["output"]:
            break
    return code, "\n".join([*kept, *lines[start:]])


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _parse_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return loads_bounded(value)
        except ValueError:
            return value
    return value
