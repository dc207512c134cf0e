"""Shared by the examples (not part of sandmem's API): their command-line flags, and the
scripted agents they use offline.

The scripted agents are deterministic ``FunctionModel`` policies, not language models: each
reads the request (task, instructions, conversation, outputs of its own tool calls) and picks
the next tool call, so what they do in the sandbox is real.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
from pathlib import Path
from typing import Any

from sandmem import UserError
from sandmem.demo import check_prerequisites, python_command
from sandmem.models import ModelRequest
from sandmem.testing import FunctionModel, tool_call

Reply = list[dict[str, Any]] | str


def parse_args(description: str) -> argparse.Namespace:
    """``--offline``, ``--model`` and ``--keep``; offline is the default when neither
    ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` is set and no ``--model`` is given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--offline",
        action="store_true",
        help="scripted agents and the extractive memory engine: no model, no network",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model for the agents and both memory phases (default: sandmem's defaults)",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="copy the final workspace into this directory"
    )
    args = parser.parse_args()
    if args.offline and args.model:
        parser.error("--offline uses no model; drop --model or --offline")
    try:  # the agents run the workspace's tests: without pytest they would only fail
        check_prerequisites()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not args.model and not (
        os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    ):
        args.offline = True
    if args.offline:
        print(
            "[offline] scripted agents (deterministic policies, not LLMs) and the extractive "
            "memory engine; pass --model or set OPENAI_API_KEY / OPENAI_BASE_URL for a real "
            "model.\n"
        )
    return args


def tree(root: Path, rel: str) -> str:
    """``rel`` under ``root`` as an indented listing (hidden files left out)."""
    base = root / rel
    if not base.exists():
        return f"{rel}/ (missing)"
    lines = [f"{rel}/"]
    for path in sorted(base.rglob("*")):
        if any(part.startswith(".") for part in path.relative_to(base).parts):
            continue
        depth = len(path.relative_to(base).parts)
        name = path.name + ("/" if path.is_dir() else f"  ({path.stat().st_size:,} bytes)")
        lines.append("    " * depth + name)
    return "\n".join(lines)


# ------------------------------------------------------------------------- reading a request


def _text(item: dict[str, object]) -> str:
    content = item.get("content", item.get("output", item.get("arguments", "")))
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def turn(request: ModelRequest) -> tuple[str, list[str], str]:
    """(the task, outputs of this turn's tool calls, text of the conversation before it)."""
    items = request.input
    last = max((i for i, item in enumerate(items) if item.get("role") == "user"), default=0)
    outputs = [_text(i) for i in items[last:] if i.get("type") == "function_call_output"]
    history = "\n".join(_text(item) for item in items[:last])
    return _text(items[last]) if items else "", outputs, history


def body(output: str) -> str:
    """A shell tool output without its status lines."""
    return output.partition("\nOutput:\n")[2] or output


def last_line(output: str) -> str:
    lines = [line for line in body(output).splitlines() if line.strip()]
    return re.sub(r"\s+in [\d.]+s$", "", lines[-1].strip()) if lines else ""


# ------------------------------------------------------------------------- the GTM analyst


def _best_segment(table: str) -> str:
    rows = list(csv.DictReader(io.StringIO(table)))
    segments: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        segments.setdefault(row["segment"], []).append(row)

    def score(name: str) -> float:
        return sum(float(r["score"]) for r in segments[name]) / len(segments[name])

    ranked = sorted(segments, key=lambda name: (-score(name), name))
    best = ranked[0]
    trials = [r["company"] for r in segments[best] if r["stage"] == "trial"]
    return (
        f"Most promising segment: {best} ({len(segments[best])} of {len(rows)} leads, average "
        f"score {score(best):.1f}; in trial: {', '.join(trials) or 'none'}). Runner-up: "
        f"{ranked[1]} (average score {score(ranked[1]):.1f})."
    )


def _gtm(request: ModelRequest) -> Reply:
    task, outputs, history = turn(request)
    if "leads.csv" in task:
        if not outputs:
            return [tool_call("exec_command", {"cmd": "cat data/leads.csv"})]
        return _best_segment(body(outputs[0]))
    if "outreach" in task:
        found = re.search(r"Most promising segment: (\w+)", history)
        if found is None:
            return "Which analysis? I have no segment analysis in this conversation."
        segment = found.group(1)
        if not outputs:
            note = (
                f"# Outreach hypothesis: {segment}\n\n"
                f"{segment.capitalize()} teams already trialling us convert when the pitch "
                "leads with audit-ready invoice reports; open with a 15-minute demo of the "
                "monthly close.\n"
            )
            patch = "*** Begin Patch\n*** Add File: notes/outreach.md\n"
            patch += "".join(f"+{line}\n" for line in note.splitlines()) + "*** End Patch"
            return [tool_call("apply_patch", {"patch": patch})]
        return (
            f"Wrote notes/outreach.md: target {segment} teams in trial with audit-ready invoice "
            "reports (based on the segment analysis earlier in this conversation)."
        )
    return "I am a scripted GTM analyst: I analyse data/leads.csv and write outreach notes."


def scripted_gtm_analyst() -> FunctionModel:
    return FunctionModel(_gtm, name="scripted-gtm-analyst")


# ------------------------------------------------------------------------- the checker


def _checker(request: ModelRequest) -> Reply:
    _, outputs, _ = turn(request)
    instructions = request.instructions or ""
    memory = re.search(r"`([^`\s]+)/MEMORY\.md`", instructions)
    if memory is None:
        return "There is no memory in this workspace, so there is no recorded fix to check."
    if not outputs:
        cmd = f"grep -n -i -E 'invoice|fix' {memory.group(1)}/MEMORY.md"
        return [tool_call("exec_command", {"cmd": cmd})]
    found = re.search(r"\bsrc/[\w./-]+\.py\b", instructions + outputs[0])
    if found is None:
        return "Memory records no fixed file, so there is nothing to check."
    target = found.group(0)
    if len(outputs) == 1:
        return [tool_call("exec_command", {"cmd": f"grep -n 'tax_rate' {target}"})]
    if len(outputs) == 2:
        return [tool_call("exec_command", {"cmd": f"{python_command()} -m pytest -q"})]
    code = body(outputs[1]).strip().splitlines()[-1].split(":", 1)[-1].strip()
    verdict = "still in place" if "* (1 + tax_rate)" in code else "NOT in place"
    return (
        f"From memory: an earlier run fixed the invoice total in {target}. Checked now: the fix "
        f"is {verdict} (`{code}`), and `{python_command()} -m pytest -q` reports "
        f"`{last_line(outputs[2])}`. I changed nothing: memory is read-only for this check."
    )


def scripted_checker() -> FunctionModel:
    return FunctionModel(_checker, name="scripted-checker")
