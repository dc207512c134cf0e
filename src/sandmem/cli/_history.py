"""The conversation history of ``sandmem run --session ID``, read back from the rollout file."""

from __future__ import annotations

import json

from sandmem._items import Item, item_kind
from sandmem.memory.storage import MemoryPaths, read_text
from sandmem.sandboxes import SandboxSession


class RolloutHistory:
    """A conversation ``Session`` read back from the conversation's rollout file, so the
    history of ``--session ID`` lives in the workspace, redacted like every rollout. Storing is
    a no-op: the Memory capability appends each run to the rollout file."""

    def __init__(self, sandbox: SandboxSession, paths: MemoryPaths, rollout_id: str) -> None:
        self.session_id = rollout_id
        self._sandbox = sandbox
        self._path = paths.rollout_file(rollout_id)

    async def get_items(self, limit: int | None = None) -> list[Item]:
        text = await read_text(self._sandbox, self._path) or ""
        items: list[Item] = []
        for line in text.splitlines():
            try:
                segment = json.loads(line)
            except ValueError:
                continue
            if isinstance(segment, dict):
                for key in ("input", "generated_items"):
                    value = segment.get(key)
                    items.extend(i for i in value or [] if isinstance(i, dict))
        items = paired_calls(items)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Item]) -> None:
        return None

    async def pop_item(self) -> Item | None:
        return None

    async def clear_session(self) -> None:
        return None


def paired_calls(items: list[Item]) -> list[Item]:
    """Drop tool calls without an output and outputs without a call (a run that was cut
    short), which model APIs refuse."""
    calls = {i.get("call_id") for i in items if item_kind(i) == "function_call"}
    outputs = {i.get("call_id") for i in items if item_kind(i) == "function_call_output"}
    return [
        i
        for i in items
        if (item_kind(i) != "function_call" or i.get("call_id") in outputs)
        and (item_kind(i) != "function_call_output" or i.get("call_id") in calls)
    ]
