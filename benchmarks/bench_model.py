"""A scripted memory model for the fake OpenAI server: it does what a capable model would do
with whatever sandmem sends, in as few turns as the request allows.

- **Phase one** (a JSON-schema request, no tools): valid artifacts for the rollout named in the
  message, at once.
- **Phase two** (a request offering the consolidation tools): it needs the raw memories'
  content. When the brief does not carry them, it first reads ``raw_memories.md`` with
  ``read_file``. Then it writes ``MEMORY.md`` and ``memory_summary.md`` in one turn: with a tool
  that writes several files when one is offered, else with two parallel ``write_file`` calls.
  ``MEMORY.md`` cites every selected conversation's rollout summary (what the phase-two brief
  asks for). Once both files are written it answers with a short final message if the run asks
  for another turn.
- Any other request (an agent run): a final answer at once.

Every reply waits ``delay_s`` first (the model's latency). The handler runs in the server's
threads; it keeps no state between requests (the transcript says what was done).
"""

from __future__ import annotations

import json
import re
from typing import Any

from bench_common import fake_openai

#: the raw memory phase one writes for rollout ``rid``: phase two looks for it in its request
RAW_MARK = "was recorded for the benchmark"
_REF = re.compile(r"^\s*- (\S+) \(updated [^;]*; summary (\S+)\)", re.MULTILINE)
_MULTI_WRITE_TOOLS = ("write_files", "write_memory_files")


def raw_memory_text(rid: str) -> str:
    return f"- rollout {rid} {RAW_MARK}; its task finished and the tests passed"


class MemoryModel:
    """The handler (see the module docstring)."""

    def __init__(self, delay_s: float = 0.0, memories_dir: str = "memories") -> None:
        self.delay_s = delay_s
        self.memories_dir = memories_dir
        self._reply = fake_openai().FakeReply

    def __call__(self, req: Any) -> Any:
        if req.wants_json() and not req.tool_names():
            return self._phase_one(req)
        if "read_file" in req.tool_names() and "search_files" in req.tool_names():
            return self._phase_two(req)
        return self._reply(text="done", delay_s=self.delay_s)

    def _phase_one(self, req: Any) -> Any:
        text = req.last_user_text()
        first = text.splitlines()[0] if text else ""
        rid = first.removeprefix("Rollout id: ").strip() or "unknown"
        return self._reply.json(
            {
                "rollout_slug": "bench",
                "rollout_summary": f"Rollout {rid}: the agent did its task; tests passed.",
                "raw_memory": raw_memory_text(rid),
            },
            delay_s=self.delay_s,
        )

    def _phase_two(self, req: Any) -> Any:
        names = req.tool_names()
        calls = req.tool_calls()
        if any(name in _MULTI_WRITE_TOOLS or name == "write_file" for name, _, _ in calls):
            return self._reply(text="Memory consolidated.", delay_s=self.delay_s)
        sent = (req.instructions or "") + json.dumps(req.items)
        refs = _REF.findall(_kept_section(req.instructions or ""))
        have_content = all(raw_memory_text(rid) in sent for rid, _ in refs)
        if not have_content and not any(name == "read_file" for name, _, _ in calls):
            path = f"{self.memories_dir}/raw_memories.md"
            return self._reply(
                tool_calls=[("read_file", {"path": path}, "read_1")], delay_s=self.delay_s
            )
        files = self._files(refs)
        multi = next((n for n in _MULTI_WRITE_TOOLS if n in names), None)
        if multi is not None:
            args = {"files": [{"path": p, "content": c} for p, c in files.items()]}
            tool_calls = [(multi, args, "write_1")]
        else:
            tool_calls = [
                ("write_file", {"path": p, "content": c}, f"write_{i}")
                for i, (p, c) in enumerate(files.items())
            ]
        return self._reply(tool_calls=tool_calls, delay_s=self.delay_s)

    def _files(self, refs: list[tuple[str, str]]) -> dict[str, str]:
        lines = ["# Memory", "", "## Benchmark tasks", "", "keywords: benchmark, tests", ""]
        for rid, summary in refs:
            cited = summary.removeprefix(f"{self.memories_dir}/")
            lines += [f"- {rid}: the task finished and the tests passed", f"  Sources: {cited}"]
        memory_md = "\n".join(lines) + "\n"
        summary_md = (
            "# Memory summary\n\nUser preferences: none recorded.\n\n"
            f"Index: {len(refs)} benchmark conversations in MEMORY.md (task group "
            "'Benchmark tasks').\n"
        )
        return {
            f"{self.memories_dir}/MEMORY.md": memory_md,
            f"{self.memories_dir}/memory_summary.md": summary_md,
        }


def _kept_section(brief: str) -> str:
    """The brief's added and retained lists (the removed conversations must not be cited)."""
    start = brief.find("- added")
    end = brief.find("- removed", start)
    return brief[start:end] if start >= 0 and end > start else brief


def is_phase_one(req: Any) -> bool:
    return bool(req.wants_json() and not req.tool_names())


def request_tokens(req: Any) -> int:
    """Input tokens of a request, estimated as its body's bytes / 4 (rounded up)."""
    return -(-int(req.size) // 4)
