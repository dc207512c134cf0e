"""Extraction by salience, not position (issue 35): what a user said in any message —
corrections, preferences, decisions, constraints, concrete facts — reaches the rollout summary,
the raw memory and (through phase two) ``MEMORY.md``, quoted in the user's words, within a
budget that grows with the conversation; assistant outcomes and the results of tool calls that
changed state are kept too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import consolidated, extracted

from sandmem.memory import generate_sync, ingest_sync, search_sync
from sandmem.memory._types import SelectedMemory
from sandmem.memory.extractive import extract
from sandmem.memory.extractive._salience import classify, salient_quote
from sandmem.memory.extractive.phase_one import raw_memory_budget, summary_budget

FILLER = [
    "Now run the tests again.",
    "Looks good, thanks.",
    "Can you tidy that function a bit?",
    "Ok continue.",
]
PLANTED = {
    "correction": "No, the staging bucket is orion-archive, not backups.",
    "preference": "From now on I prefer structlog over print statements.",
    "decision": "Let's go with Postgres 16 for the ledger service.",
    "constraint": "The nightly build must finish in under 40 minutes.",
    "fact": "The customer id for Acme is CU-88213.",
}


def _turn(n: int, user: str, *, items: list[dict[str, Any]] | None = None, answer: str = "") -> str:
    answer = answer or f"Done with that ({n})."
    generated = [*(items or []), {"type": "message", "role": "assistant", "content": answer}]
    return json.dumps(
        {
            "updated_at": f"2025-06-01T12:{n % 60:02d}:00Z",
            "rollout_id": "conv",
            "input": [{"type": "message", "role": "user", "content": user}],
            "generated_items": generated,
            "final_output": answer,
            "terminal_state": "completed",
        }
    )


def _conversation(messages: list[str], **extra: Any) -> str:
    return "\n".join(_turn(n, text, **extra.get(str(n), {})) for n, text in enumerate(messages, 1))


def _messages(count: int, at: int, planted: str) -> list[str]:
    texts = ["Fix the flaky ledger export in ledger/export.py."]
    texts += [FILLER[n % len(FILLER)] for n in range(1, count)]
    texts[at - 1] = planted if at > 1 else texts[0] + " " + planted
    return texts


@pytest.mark.parametrize("kind", sorted(PLANTED))
@pytest.mark.parametrize(("count", "at"), [(3, 1), (10, 7), (30, 18), (40, 40)])
def test_what_the_user_said_is_kept_from_any_message(kind: str, count: int, at: int) -> None:
    planted = PLANTED[kind]
    artifacts = extract("conv", _conversation(_messages(count, at, planted)))
    assert artifacts is not None
    quoted = planted if at == 1 else f'"{planted}"'  # the first message is quoted whole
    assert quoted in artifacts.rollout_summary
    assert quoted in artifacts.raw_memory
    if at > 1:
        label = kind.capitalize()
        assert f"- {label} (message {at}): " in artifacts.rollout_summary


def _selected(rollout_id: str, text: str) -> SelectedMemory:
    return extracted(rollout_id, text.replace('"conv"', json.dumps(rollout_id)))


def test_late_facts_reach_memory_md() -> None:
    chosen = [
        _selected(f"conv-{n}", _conversation(_messages(12, 9 + n % 3, planted)))
        for n, planted in enumerate(PLANTED.values())
    ]
    memory = consolidated(chosen)
    for planted in PLANTED.values():
        assert planted in memory.memory_md
    assert "From now on I prefer structlog" in memory.memory_summary_md


def test_the_budget_grows_with_the_conversation_and_cuts_the_least_salient_first() -> None:
    assert summary_budget(1) == 6 * 1024 and summary_budget(11) == 16 * 1024
    assert summary_budget(1000) == 64 * 1024
    assert raw_memory_budget(1) == 3 * 1024 and raw_memory_budget(1000) == 16 * 1024
    # 90 messages, each a plain fact; a correction late among them
    texts = [
        " ".join(f"Row {n}.{i} of table t{n} holds {n * 7 + i} items." for i in range(12))
        for n in range(90)
    ]
    texts[80] = "No, the report must use UTC timestamps, not local time."
    artifacts = extract("conv", _conversation(texts))
    assert artifacts is not None
    assert len(artifacts.rollout_summary.encode()) <= summary_budget(90)
    assert len(artifacts.raw_memory.encode()) <= raw_memory_budget(90)
    assert '"No, the report must use UTC timestamps, not local time."' in artifacts.rollout_summary
    assert "more omitted" in artifacts.rollout_summary  # some plain facts did not fit
    assert "UTC timestamps" in artifacts.raw_memory


def test_outcomes_and_state_changing_tool_results_are_kept() -> None:
    deploy = [
        {
            "type": "function_call",
            "call_id": "d1",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": "python scripts/deploy.py --env staging"}),
        },
        {
            "type": "function_call_output",
            "call_id": "d1",
            "output": "Exit code: 0\nOutput:\nbuilding...\nDeployed release rel-4471 to staging\n",
        },
        {
            "type": "function_call",
            "call_id": "t1",
            "name": "create_ticket",
            "arguments": json.dumps({"title": "rotate keys"}),
        },
        {"type": "function_call_output", "call_id": "t1", "output": "Created ticket OPS-3317"},
        {
            "type": "function_call",
            "call_id": "r1",
            "name": "read_file",
            "arguments": json.dumps({"path": "notes.txt"}),
        },
        {"type": "function_call_output", "call_id": "r1", "output": "version 9.9.9 of nothing"},
    ]
    long_answer = " ".join(["This step went fine and nothing else happened."] * 12)
    long_answer += " The root cause was a cache TTL of 86400 seconds in cache/config.toml."
    text = _conversation(
        ["Deploy the ledger service.", "Now find out why the totals drift."],
        **{"1": {"items": deploy}, "2": {"answer": long_answer}},
    )
    artifacts = extract("conv", text)
    assert artifacts is not None
    summary, raw = artifacts.rollout_summary, artifacts.raw_memory
    assert "Deployed release rel-4471 to staging" in summary
    assert "Deployed release rel-4471 to staging" in raw
    assert "Created ticket OPS-3317" in summary and "Created ticket OPS-3317" in raw
    assert "9.9.9" not in summary  # a read changes nothing: its output is not quoted
    assert "cache TTL of 86400 seconds" in summary and "cache TTL of 86400 seconds" in raw


def test_sentences_are_classed_by_their_wording() -> None:
    cases = {
        "No, use port 8443.": "correction",
        "Always run ruff first.": "preference",
        "We'll switch to httpx for the client.": "decision",
        "It must not take more than 2 GB of RAM.": "constraint",
        "Can you add a --dry-run flag?": "request",
        "Add retries to the uploader.": "request",
        "Maria owns the billing service since 2024-03-01.": "fact",
        "ok thanks": None,
        "That looks nice.": None,
    }
    assert {text: classify(text, first=False) for text in cases} == cases
    assert classify("No, use port 8443.", first=True) != "correction"  # a first message asks


def test_a_long_quote_keeps_its_most_concrete_sentences() -> None:
    text = "I looked around a lot. " * 20 + "The server listens on port 7443. " + "Fine. " * 20
    quoted = salient_quote(text, 120)
    assert "port 7443" in quoted and len(quoted) <= 120
    assert salient_quote("short and whole", 120) == "short and whole"


def test_extraction_is_deterministic() -> None:
    text = _conversation(_messages(25, 20, PLANTED["decision"]))
    assert extract("conv", text) == extract("conv", text)


def test_a_late_fact_of_an_ingested_chat_is_found_by_search(tmp_path: Path) -> None:
    """Through the whole pipeline: a chat transcript whose fact is in its 14th user message and
    in a tool's output, ingested, generated with the extractive engine, then searched."""
    source = tmp_path / "chat.jsonl"
    rows: list[dict[str, Any]] = []
    for n in range(1, 16):
        text = FILLER[n % len(FILLER)] if n > 1 else "Help me ship the ledger export."
        if n == 14:
            text = "The export bucket is called quasar-ledger-eu and lives in eu-north-1."
        rows += [{"role": "user", "content": text}]
        if n == 9:
            call = {"id": "c9", "type": "function", "function": {"name": "deploy_export"}}
            rows += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c9", "content": "Released build 7731 to prod"},
            ]
        rows += [{"role": "assistant", "content": f"Done ({n})."}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ingest_sync(workspace, [source])
    assert generate_sync(workspace, engine="extractive").complete
    for query, fact in (
        ("which bucket holds the export", "quasar-ledger-eu"),
        ("release build number prod", "Released build 7731 to prod"),
    ):
        hits = search_sync(workspace, query).hits
        assert hits and fact in hits[0].snippet, (query, hits[:2])
