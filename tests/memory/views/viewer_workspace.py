"""A workspace for the viewer tests: four conversations — two done and consolidated, one whose
extraction failed for good, one recorded but not yet extracted — and hostile hand edits."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))

from cli_workspaces import (
    DEPLOY,
    INVOICE,
    Conversation,
    _record,
    build_workspace,
    failing_phase_one,
)

from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig

#: a task whose text is markup: shown as text in the conversations table
TASK = "What changed? <script>document.body.setAttribute('data-pwned', '3')</script>"
FLAKY = Conversation("flaky-build", "Why does the build fail on Mondays?", "ls", "No idea.")
#: a fake credential of a recognisable shape, written into MEMORY.md by hand
SECRET = "sk-proj-" + "Zq8" * 16
HOSTILE = (
    "\n## Hand-written notes <script>document.body.setAttribute('data-pwned', '1')</script>\n"
    "Keywords: <img src=x onerror=\"document.body.setAttribute('data-pwned', '2')\">\n"
    f"- the deploy key is {SECRET}\n"
    "- see rollout_summaries/missing_file.md\n"
)


def build_viewer_workspace(root: Path) -> Path:
    build_workspace(root, [INVOICE, DEPLOY])
    failing = MemoryGenerateConfig(
        phase_one_model=failing_phase_one("RuntimeError: model server is down"),
        phase_two_model=EXTRACTIVE,
        max_attempts=1,
    )
    asyncio.run(_record(root, [FLAKY], failing))
    segment = {
        "updated_at": "2026-11-30T09:00:00.000Z",
        "rollout_id": "later-question",
        "input": [{"type": "message", "role": "user", "content": TASK}],
        "generated_items": [],
        "terminal_metadata": {
            "terminal_state": "failed",
            "exception_type": "ModelRequestError",
            "exception_message": "timeout",
            "has_final_output": False,
        },
    }
    (root / "sessions/later-question.jsonl").write_text(json.dumps(segment) + "\n")
    with (root / "memories/MEMORY.md").open("a", encoding="utf-8") as fh:
        fh.write(HOSTILE)
    with (root / "memories/generation_log.jsonl").open("a") as log:
        log.write("not json\n")
    return root
