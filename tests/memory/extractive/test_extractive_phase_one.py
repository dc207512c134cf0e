"""Extractive phase one on hand-written rollouts: golden files, expected facts, no secrets,
determinism, bounds. Regenerate the golden files with ``SANDMEM_UPDATE_GOLDEN=1``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sandmem.memory.extractive import (
    RAW_MEMORY_MAX_BYTES,
    SLUG_MAX_CHARS,
    SUMMARY_MAX_BYTES,
    extract,
)

DATA = Path(__file__).parents[2] / "data" / "extractive"
ROLLOUTS = DATA / "rollouts"
GOLDEN = DATA / "golden"
SHARED_CORPUS = Path(__file__).parents[2] / "data" / "rollouts"
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,79}$")
NAMES = sorted(p.stem for p in ROLLOUTS.glob("*.jsonl"))
SECRETS = (
    "sk-proj-Zq8vT2mXc4Lp9Rb7Nw1Ks6Yd3Hf5Gj0Ua8Ee2Io4Pt6Rs1Wx3Vb5Nm7Kl9Jh2Fg4Dc6",
    "wk_live_51HcT9fLr2QxV8mNp4Zs7Kd3Gy6Bw1Ja",
    "ghp_R7tY2uI9oP4aS6dF1gH3jK8lZ5xC0vB2nM4q",
)


def assert_golden(path: Path, actual: str) -> None:
    """Byte-for-byte comparison with a golden file (rewritten when SANDMEM_UPDATE_GOLDEN=1)."""
    if os.environ.get("SANDMEM_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual.encode("utf-8"))
    assert path.exists(), f"missing golden file {path}; run with SANDMEM_UPDATE_GOLDEN=1"
    assert actual.encode("utf-8") == path.read_bytes(), f"{path} differs from the output"


def rollout(name: str) -> str:
    return (ROLLOUTS / f"{name}.jsonl").read_text(encoding="utf-8")


def run(name: str) -> tuple[str, str, str]:
    artifacts = extract(name, rollout(name))
    assert artifacts is not None
    return artifacts.rollout_slug, artifacts.rollout_summary, artifacts.raw_memory


def test_there_are_at_least_six_hand_written_rollouts() -> None:
    assert len(NAMES) >= 6


@pytest.mark.parametrize("name", NAMES)
def test_golden(name: str) -> None:
    slug, summary, raw = run(name)
    assert_golden(GOLDEN / name / "slug.txt", slug + "\n")
    assert_golden(GOLDEN / name / "rollout_summary.md", summary)
    assert_golden(GOLDEN / name / "raw_memory.md", raw)


@pytest.mark.parametrize("name", NAMES)
def test_two_runs_give_identical_bytes(name: str) -> None:
    assert run(name) == run(name)


@pytest.mark.parametrize("name", NAMES)
def test_bounds_and_slug(name: str) -> None:
    slug, summary, raw = run(name)
    assert SLUG.fullmatch(slug) and len(slug) <= SLUG_MAX_CHARS
    assert len(summary.encode()) <= SUMMARY_MAX_BYTES
    assert len(raw.encode()) <= RAW_MEMORY_MAX_BYTES
    assert summary.endswith("\n") and raw.endswith("\n")


@pytest.mark.parametrize("name", NAMES)
def test_every_raw_memory_bullet_cites_the_rollout(name: str) -> None:
    _, _, raw = run(name)
    bullets = [line for line in raw.splitlines() if line.startswith("- ")]
    assert bullets
    assert all(line.endswith(f"(rollout {name})") for line in bullets)


def test_bug_fix_with_failed_then_passing_tests() -> None:
    slug, summary, raw = run("bugfix_invoice")
    assert slug == "inspect-workspace-fix-invoice-total-bug-acme_metrics-report"
    fix = (
        "changed `return round(subtotal + tax_rate, 2)` to "
        "`return round(subtotal * (1 + tax_rate), 2)`"
    )
    for text in (summary, raw):
        assert "src/acme_metrics/report.py" in text
        assert fix in text
        assert "`python -m pytest -q`" in text
    assert "`python -m pytest -q` → exit 1" in summary
    assert "`python -m pytest -q` → exit 0 (2 passed in 0.02s)" in summary
    assert (
        "- Fix: `python -m pytest -q` failed (exit 1: `FAILED tests/test_report.py::"
        "test_invoice_total - assert 100.21 == 121.0`); fixed by editing "
        f"`src/acme_metrics/report.py` ({fix}); then it passed (rollout bugfix_invoice)"
    ) in raw
    assert "- Works: `python -m pytest -q` (tests; 2 passed in 0.02s)" in raw
    assert "defines `format_invoice_total(subtotal: float, tax_rate: float)`" in raw


def test_user_correcting_the_agent() -> None:
    _, summary, raw = run("user_correction")
    assert '- Preference (message 2): "No, don\'t use pip in this repo."' in summary
    assert '- Preference: "Always use uv: `uv sync`, then `uv run pytest -q`."' in raw
    assert '- Preference: "And please use click instead of argparse for new options."' in raw
    assert '- Correction: "Wait, the flag also needs a short form -v."' in raw
    # the replayed history of segment 2 is not counted twice
    assert summary.count("`pip install -e .` → exit 0") == 1
    # a message made only of feedback is not a new task
    assert raw.count("- Task:") == 1
    assert "fixed by editing `tests/test_cli.py`" in raw


def test_failed_run() -> None:
    _, summary, raw = run("failed_run")
    # a model-server error is no learning: its text never reaches memory (issue 29)
    assert "Terminal state: failed (model-server or settings error, not part of the task)" in (
        summary
    )
    assert "HTTP 503" not in summary and "HTTP 503" not in raw
    assert "- Outcome: failed (model-server or settings error" in raw
    assert "`make deploy-docs` failed (exit 2: `make: *** No rule to make target" in raw
    assert "(2 attempts); not recovered" in raw  # the timed-out rerun is merged
    assert "Unable to locate credentials" in raw
    assert "apply_patch on `scripts/deploy_docs.sh` failed (error: `PatchError:" in raw
    assert "`make deploy-site ENV=staging AWS_PROFILE=docs` → timed out" in summary


def test_multi_segment_conversation() -> None:
    _, summary, raw = run("multi_segment")
    assert "- Segment 3: max_turns_exceeded" in summary
    assert "- Outcome: 3 segments: completed, completed, max_turns_exceeded" in raw
    assert raw.count("- Task:") == 3
    assert "moved `scripts/backup.sh` to `scripts/snapshot.sh`" in summary
    assert "`scripts/snapshot.sh`: described as" in raw
    assert "`backups/data-20250530.tar.gz`: deleted" in raw
    # the torn line between segments 1 and 2 is skipped, not fatal
    assert "Segment 2: completed" in summary


def test_data_analysis_session() -> None:
    _, summary, raw = run("data_analysis")
    assert "`data/orders.csv`: columns `order_id`, `region`, `amount`, `ordered_at`" in raw
    assert "No module named 'pandas'" in raw
    assert "later `mkdir -p reports && python scripts/aov.py data/orders.csv" in raw
    assert "written `reports/aov_by_region.tsv`" in summary
    assert "North has the highest average order value (84.20)" in raw
    assert '- Preference: "I prefer plain Python over notebooks."' in raw


def test_leaked_api_key_never_reaches_the_artifacts() -> None:
    slug, summary, raw = run("leaked_key")
    text = rollout("leaked_key")
    assert all(secret in text for secret in SECRETS)  # the fixture does leak them
    for secret in SECRETS:
        for piece in (secret, secret[:16], secret[-12:]):
            assert piece not in summary + raw + slug
    assert "[REDACTED:" in summary
    assert "WEATHER_API_KEY" in raw  # the fix itself is kept


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json at all\n{broken",
        json.dumps({"rollout_id": "x", "input": [], "generated_items": []}),
        json.dumps(
            {
                "rollout_id": "x",
                "input": [{"role": "assistant", "content": "hello"}],
                "generated_items": [],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        ),
    ],
)
def test_nothing_worth_remembering_gives_none(text: str) -> None:
    assert extract("x", text) is None


def test_tolerates_odd_items() -> None:
    segment = {
        "rollout_id": "odd",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Run the build."}]},
            "not an item",
        ],
        "generated_items": [
            {"type": "function_call", "call_id": "1", "name": "exec_command", "arguments": "{"},
            {"type": "function_call_output", "call_id": "1", "output": ["part", {"x": 1}]},
            {"type": "function_call_output", "call_id": "unknown", "output": "exit_code: 1"},
            {
                "type": "function_call",
                "call_id": "2",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "echo 'unbalanced"}),
            },
            {"type": "function_call_output", "call_id": "2", "output": "exit code 0\n"},
            {
                "type": "function_call",
                "call_id": "3",
                "name": "apply_patch",
                "arguments": json.dumps({"patch": "*** Begin Patch\n*** Update File: a.py\n"}),
            },
            {"type": "function_call_output", "call_id": "3", "output": "Error: PatchError: x"},
            {"type": "reasoning", "summary": []},
        ],
        "final_output": {"answer": 42},
        "terminal_metadata": "bad",
    }
    artifacts = extract("odd", json.dumps(segment))
    assert artifacts is not None
    assert "apply_patch on `a.py` failed" in artifacts.rollout_summary
    assert '{"answer": 42}' in artifacts.rollout_summary
    assert "Terminal state: unknown" in artifacts.rollout_summary


def test_huge_rollout_stays_within_bounds() -> None:
    items: list[dict[str, object]] = [{"role": "user", "content": "Fix everything. " * 200}]
    for n in range(400):
        call = {"cmd": f"python -m pytest -q tests/test_{n}.py && touch out_{n}.txt"}
        items.append(
            {
                "type": "function_call",
                "call_id": str(n),
                "name": "exec_command",
                "arguments": json.dumps(call),
            }
        )
        code = n % 2
        items.append(
            {
                "type": "function_call_output",
                "call_id": str(n),
                "output": f"Exit code: {code}\nOutput:\nFAILED t.py::x{n} - boom {'x' * 300}\n",
            }
        )
    segment = {"rollout_id": "big", "input": items[:1], "generated_items": items[1:]}
    artifacts = extract("big", json.dumps(segment))
    assert artifacts is not None
    assert len(artifacts.rollout_summary.encode()) <= SUMMARY_MAX_BYTES
    assert len(artifacts.raw_memory.encode()) <= RAW_MEMORY_MAX_BYTES
    assert "more omitted" in artifacts.rollout_summary


@pytest.mark.parametrize("path", sorted(SHARED_CORPUS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_shared_rollout_corpus(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    first = extract(path.stem, text)
    assert first is not None
    assert first == extract(path.stem, text)
    assert SLUG.fullmatch(first.rollout_slug)
    assert len(first.rollout_summary.encode()) <= SUMMARY_MAX_BYTES
    assert len(first.raw_memory.encode()) <= RAW_MEMORY_MAX_BYTES
