"""``sandmem run`` with the person's personal memory attached (``docs/scopes.md``, "A run"),
through the fake OpenAI server: the agent's instructions carry both scopes' summaries, each
labelled; a preference the agent writes lands in the personal layout, and the run's
transcript and memory generation stay in the project."""

from __future__ import annotations

import os
from pathlib import Path

from cli_workspaces import invoke
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

ANSWER = "Done; noted that you want tabs."
PREFERENCE = (
    "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n+- The person wants tabs.\n*** End Patch\n"
)


def handler(req: FakeRequest) -> FakeReply:
    """The agent writes one preference to the personal scope, then answers."""
    if req.tool_outputs():
        return FakeReply(text=ANSWER)
    args = {"patch": PREFERENCE, "scope": "personal"}
    return FakeReply(tool_calls=[("memory_scope_update", args, "pref-1")])


def layout(root: Path, summary: str) -> None:
    (root / "memories").mkdir(parents=True)
    (root / "sessions").mkdir()
    (root / "memories" / "memory_summary.md").write_text(summary)
    (root / "memories" / "MEMORY.md").write_text("")


def test_a_run_reads_both_scopes_and_writes_a_preference_to_personal(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = handler
    personal = Path(os.environ["SANDMEM_HOME"]) / "personal"
    layout(personal, "Person: answers in French.")
    project = tmp_path / "shop"
    layout(project, "Project: build with `make dist`.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    args = ("run", "-w", project, "--engine", "extractive", "--session", "s1", "Indent this")
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout == ANSWER + "\n"
    first = fake_openai.requests[0]
    instructions = first.instructions or ""
    assert "### [project] project memory" in instructions and "make dist" in instructions
    assert "### [personal] personal memory" in instructions and "in French" in instructions
    assert "project's memory wins" in instructions
    assert "memory_scope_update" in first.tool_names()
    assert "The person wants tabs." in (personal / "memories" / "MEMORY.md").read_text()
    assert "wants tabs" not in (project / "memories" / "MEMORY.md").read_text()
    assert sorted(p.name for p in (project / "sessions").glob("*.jsonl")) == ["s1.jsonl"]
    assert list((personal / "sessions").iterdir()) == []
    assert list((personal / "memories" / "rollout_summaries").glob("*")) == []
