"""Extractive phase two: golden consolidation, grouping, forgetting, preferences first,
budgets, manual edits, determinism. Regenerate golden files with ``SANDMEM_UPDATE_GOLDEN=1``."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from memory_doubles import extracted

from sandmem.memory._types import ConsolidationInputs, ConsolidationOutput, SelectedMemory
from sandmem.memory.extractive import consolidate

DATA = Path(__file__).parents[2] / "data" / "extractive"
GOLDEN = DATA / "golden"
ALL = [
    "bugfix_invoice",
    "data_analysis",
    "failed_run",
    "leaked_key",
    "multi_segment",
    "regression_test",
    "user_correction",
]
FIX = (
    "changed `return round(subtotal + tax_rate, 2)` to `return round(subtotal * (1 + tax_rate), 2)`"
)


def assert_golden(path: Path, actual: str) -> None:
    """Byte-for-byte comparison with a golden file (rewritten when SANDMEM_UPDATE_GOLDEN=1)."""
    if os.environ.get("SANDMEM_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual.encode("utf-8"))
    assert path.exists(), f"missing golden file {path}; run with SANDMEM_UPDATE_GOLDEN=1"
    assert actual.encode("utf-8") == path.read_bytes(), f"{path} differs from the output"


def selected(name: str) -> SelectedMemory:
    """What the pipeline would hand phase two after an extractive phase one of ``name``."""
    return extracted(name, (DATA / "rollouts" / f"{name}.jsonl").read_text(encoding="utf-8"))


def inputs(
    names: list[str],
    *,
    removed: tuple[str, ...] | list[str] = (),
    current: str = "",
    consolidated: str = "",
    memory_max: int = 96_000,
    summary_max: int = 24_000,
) -> ConsolidationInputs:
    chosen = [selected(n) for n in names]
    return ConsolidationInputs(
        memories_dir="memories",
        selected=chosen,
        added=[m.ref for m in chosen],
        retained=[],
        removed=[selected(n).ref for n in removed],
        current_memory_md=current,
        consolidated_memory_md=consolidated,
        memory_md_max_bytes=memory_max,
        summary_max_bytes=summary_max,
    )


def groups(memory_md: str) -> dict[str, str]:
    """``## heading`` → its text."""
    parts = memory_md.split("\n## ")[1:]
    return {p.split("\n", 1)[0]: p for p in parts}


def sections(summary: str) -> list[str]:
    return [line[3:] for line in summary.splitlines() if line.startswith("## ")]


@pytest.fixture(scope="module")
def everything() -> ConsolidationOutput:
    return consolidate(inputs(ALL))


# --------------------------------------------------------------------- golden


def test_golden_all_rollouts(everything: ConsolidationOutput) -> None:
    assert_golden(GOLDEN / "consolidated" / "MEMORY.md", everything.memory_md)
    assert_golden(GOLDEN / "consolidated" / "memory_summary.md", everything.memory_summary_md)
    assert everything.skills == {}


def test_invoice_fix_alone_names_file_fix_and_test_command() -> None:
    """Done-when 2: after run 1 alone, memory_summary.md names the file, the fix, the tests."""
    out = consolidate(inputs(["bugfix_invoice"]))
    assert_golden(GOLDEN / "invoice_only" / "MEMORY.md", out.memory_md)
    assert_golden(GOLDEN / "invoice_only" / "memory_summary.md", out.memory_summary_md)
    summary = out.memory_summary_md
    assert "`src/acme_metrics/report.py`" in summary
    assert FIX in summary
    assert "`python -m pytest -q` works (tests)" in summary


def test_two_runs_and_any_input_order_give_identical_bytes() -> None:
    first = consolidate(inputs(ALL))
    assert consolidate(inputs(ALL)) == first
    assert consolidate(inputs(list(reversed(ALL)))) == first


# --------------------------------------------------------------------- structure


def test_groups_share_files_and_have_keywords_learnings_and_sources(
    everything: ConsolidationOutput,
) -> None:
    found = groups(everything.memory_md)
    assert len(found) == 6  # the regression test joins the invoice fix
    # the group's heading names each of its tasks
    [invoice] = [
        text
        for heading, text in found.items()
        if heading.startswith(
            "Inspect the workspace and fix the invoice total bug in src/acme_metrics/report.py / "
        )
    ]
    assert "(rollout regression_test)" in invoice and "(rollout bugfix_invoice)" in invoice
    assert (
        "- rollout_summaries/bugfix_invoice_inspect-workspace-fix-invoice-total-bug-acme_metrics"
        "-report.md (rollout bugfix_invoice, updated 2025-06-02T09:15:00.000Z, completed)"
    ) in invoice
    for text in found.values():
        lines = text.splitlines()
        assert lines[1].startswith("Keywords: ") and len(lines[1]) > len("Keywords: ")
        assert lines[2] == "Learnings:"
        assert "Sources:" in lines
        assert all(
            ln.startswith("- rollout_summaries/") for ln in lines[lines.index("Sources:") + 1 :]
        )
    # newest group first
    assert next(iter(found)).startswith("The weather client")


def test_same_fact_from_two_rollouts_is_one_learning_citing_both() -> None:
    twin = replace(
        selected("bugfix_invoice"),
        ref=replace(
            selected("bugfix_invoice").ref,
            rollout_id="invoice-again",
            updated_at="2025-06-10T00:00:00Z",
        ),
    )
    chosen = [selected("bugfix_invoice"), twin]
    out = consolidate(replace(inputs([]), selected=chosen))
    assert "(rollouts invoice-again, bugfix_invoice)" in out.memory_md
    assert "`python -m pytest -q` works (tests) (rollouts invoice-again, bugfix_invoice)" in (
        out.memory_summary_md
    )


def test_summary_puts_preferences_first_then_tips_then_index(
    everything: ConsolidationOutput,
) -> None:
    summary = everything.memory_summary_md
    assert sections(summary) == ["User preferences", "General tips", "What memory holds"]
    prefs = summary.split("## User preferences\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert prefs == [
        '- "I prefer plain Python over notebooks." (rollout data_analysis)',
        '- "No, don\'t use pip in this repo." (rollout user_correction)',
        '- "Always use uv: `uv sync`, then `uv run pytest -q`." (rollout user_correction)',
        '- "And please use click instead of argparse for new options." (rollout user_correction)',
    ]
    assert "- Did not work: `make deploy-docs` failed (exit 2" in summary
    assert "last outcome: failed (model-server or settings error" in summary
    assert "ModelRequestError" not in summary and "HTTP 503" not in summary


def test_secrets_in_raw_memories_are_redacted() -> None:
    leaky = replace(
        selected("leaked_key"),
        raw_memory="- Note: OPENAI_API_KEY=sk-proj-Zq8vT2mXc4Lp9Rb7Nw1Ks6Yd3Hf5Gj0Ua8Ee2Io4Pt6Rs1W"
        " works (rollout leaked_key)\n",
    )
    out = consolidate(replace(inputs([]), selected=[leaky]))
    assert "sk-proj-Zq8v" not in out.memory_md + out.memory_summary_md
    assert "[REDACTED:" in out.memory_md


def test_free_form_raw_memories_from_a_model_are_understood() -> None:
    raw = (
        "# Invoice rounding\n"
        "- The user prefers `make test` over calling pytest directly (rollout m1)\n"
        "- `src/acme_metrics/report.py` holds the invoice helpers; totals were\n"
        "  rounded too early (rollout m1)\n"
    )
    memory = replace(
        selected("bugfix_invoice"),
        raw_memory=raw,
        ref=replace(selected("bugfix_invoice").ref, rollout_id="m1"),
    )
    out = consolidate(
        replace(inputs(["bugfix_invoice"]), selected=[memory, selected("bugfix_invoice")])
    )
    assert "- The user prefers `make test` over calling pytest directly (rollout m1)" in (
        out.memory_summary_md
    )
    assert "holds the invoice helpers; totals were rounded too early (rollout m1)" in out.memory_md
    assert len(groups(out.memory_md)) == 1  # both mention src/acme_metrics/report.py


def test_nothing_selected_still_writes_valid_files() -> None:
    out = consolidate(inputs([]))
    assert "No memories yet." in out.memory_md
    assert out.memory_summary_md.strip()


# --------------------------------------------------------------------- forgetting


def test_removed_rollouts_facts_disappear() -> None:
    before = consolidate(inputs(["bugfix_invoice", "data_analysis", "user_correction"]))
    assert "acme_metrics" in before.memory_md and "uv sync" in before.memory_summary_md
    after = consolidate(
        inputs(
            ["data_analysis"],
            removed=["bugfix_invoice", "user_correction"],
            current=before.memory_md,
            consolidated=before.memory_md,
        )
    )
    for text in (after.memory_md, after.memory_summary_md):
        assert "acme_metrics" not in text and "bugfix_invoice" not in text
        assert "uv sync" not in text and "user_correction" not in text
        assert "orders.csv" in text
    assert "Notes kept from manual edits" not in after.memory_md


# --------------------------------------------------------------------- budgets


@pytest.mark.parametrize(("memory_max", "summary_max"), [(6000, 1500), (2500, 700), (300, 200)])
def test_budgets_are_respected_without_cutting_lines(memory_max: int, summary_max: int) -> None:
    full = consolidate(inputs(ALL))
    out = consolidate(inputs(ALL, memory_max=memory_max, summary_max=summary_max))
    assert len(out.memory_md.encode()) <= memory_max
    assert len(out.memory_summary_md.encode()) <= summary_max
    full_lines = set(full.memory_md.splitlines()) | set(full.memory_summary_md.splitlines())
    others = out.memory_md.split("## Other conversations", 1)
    # dropped groups' conversations stay cited: their source lines close the file
    cited = set(others[1].splitlines()) if len(others) == 2 else set()
    for line in others[0].splitlines() + out.memory_summary_md.splitlines():
        assert line in full_lines or "more omitted" in line
    assert all(
        line in full_lines or line in ("", "Sources:") or line.startswith("Sources (rollout ids):")
        for line in cited
    )


def test_every_conversation_stays_cited_when_the_budget_is_tight() -> None:
    """Far more conversations than the budget has room for in full: each is still cited, by
    its id in the closing block, and the file stays within its budget."""
    from sandmem.memory.verify import cites

    base = selected("bugfix_invoice")
    many = [
        replace(base, ref=replace(base.ref, rollout_id=f"conv-{n:04d}", rollout_summary_file=""))
        for n in range(1000)
    ]
    data = inputs([])
    out = consolidate(replace(data, selected=many, added=[m.ref for m in many]))
    assert len(out.memory_md.encode()) <= data.memory_md_max_bytes
    assert all(cites(out.memory_md, m.ref) for m in many)


def test_over_budget_drops_oldest_groups_and_details_first() -> None:
    full = consolidate(inputs(ALL))
    out = consolidate(inputs(ALL, memory_max=6500))
    kept = [g for g in groups(out.memory_md) if g != "Other conversations"]
    assert kept == list(groups(full.memory_md))[: len(kept)]  # a prefix: newest groups stay
    assert "Create a script scripts/backup.sh" not in out.memory_md  # the oldest group went
    # ... but its conversation is still cited (every selected conversation is, by construction)
    assert "rollout_summaries/multi_segment_" in out.memory_md.split("## Other conversations")[1]
    newest = groups(out.memory_md)[kept[0]]
    assert "- Task:" in newest and "- Works:" in newest


def test_summary_budget_drops_the_index_before_preferences() -> None:
    out = consolidate(inputs(ALL, summary_max=1500))
    assert "I prefer plain Python over notebooks." in out.memory_summary_md
    assert "more omitted" in out.memory_summary_md


# --------------------------------------------------------------------- manual edits


def test_lines_added_by_hand_survive_in_their_group_and_in_notes() -> None:
    first = consolidate(inputs(["bugfix_invoice", "data_analysis"]))
    heading = "## Which region has the highest average order value in data/orders.csv?"
    edited = first.memory_md.replace(
        heading + "\n", heading + "\n- Orders before 2024 are in data/archive/ (added by Ana)\n"
    )
    edited = edited.replace("# Memory\n", "# Memory\n\nAsk Ana before touching billing.\n", 1)
    edited += "\n## Deploying\n- Deploys need the VPN.\n"
    second = consolidate(
        inputs(["bugfix_invoice", "data_analysis"], current=edited, consolidated=first.memory_md)
    )
    found = groups(second.memory_md)
    notes = found["Notes kept from manual edits"]
    assert "Ask Ana before touching billing." in notes
    assert "### Deploying\n- Deploys need the VPN." in notes
    orders = found[heading[3:]]
    assert (
        "Notes kept from manual edits:\n- Orders before 2024 are in data/archive/ (added by Ana)\n"
        in orders
    )
    assert next(iter(found)) == "Notes kept from manual edits"
    # a later consolidation with no new edit keeps them, once
    third = consolidate(
        inputs(
            ["bugfix_invoice", "data_analysis"],
            current=second.memory_md,
            consolidated=second.memory_md,
        )
    )
    assert third.memory_md == second.memory_md


def test_notes_of_a_forgotten_group_move_to_the_notes_section() -> None:
    first = consolidate(inputs(["bugfix_invoice", "data_analysis"]))
    heading = "## Inspect the workspace and fix the invoice total bug in src/acme_metrics/report.py"
    edited = first.memory_md.replace(heading + "\n", heading + "\n- Tax rates are fractions.\n")
    second = consolidate(
        inputs(
            ["data_analysis"],
            removed=["bugfix_invoice"],
            current=edited,
            consolidated=first.memory_md,
        )
    )
    notes = groups(second.memory_md)["Notes kept from manual edits"]
    assert f"### {heading[3:]}\n- Tax rates are fractions." in notes
    assert "bugfix_invoice" not in second.memory_md


def test_a_generated_line_deleted_by_hand_stays_deleted() -> None:
    first = consolidate(inputs(["bugfix_invoice"]))
    victim = next(ln for ln in first.memory_md.splitlines() if ln.startswith("- Result:"))
    edited = first.memory_md.replace(victim + "\n", "")
    second = consolidate(inputs(["bugfix_invoice"], current=edited, consolidated=first.memory_md))
    assert victim not in second.memory_md
    assert "generated lines deleted by hand" in second.memory_md
    # and at the next consolidation too, when the deletion is no longer a fresh diff
    third = consolidate(
        inputs(["bugfix_invoice"], current=second.memory_md, consolidated=second.memory_md)
    )
    assert victim not in third.memory_md
    assert third.memory_md == second.memory_md


def test_hand_written_memory_before_any_consolidation_is_kept() -> None:
    out = consolidate(inputs(["bugfix_invoice"], current="# Notes\n\n- Use the staging VPN.\n"))
    assert "- Use the staging VPN." in groups(out.memory_md)["Notes kept from manual edits"]
    assert "\n### Notes\n" in out.memory_md


def test_one_popular_file_does_not_chain_everything_into_one_group() -> None:
    base = selected("bugfix_invoice")
    many = [
        replace(
            base,
            ref=replace(
                base.ref, rollout_id=f"r{n:02d}", updated_at=f"2025-07-{n + 1:02d}T00:00:00Z"
            ),
            raw_memory=f'## Task {n}\n- Task: "edit `{path}` for ticket {n}"\n',
        )
        for n in range(20)
        for path in ["src/app/main.py" if n % 2 else f"src/other_{n}.py"]
    ]
    out = consolidate(replace(inputs([]), selected=many))
    sizes = sorted(text.count("- rollout_summaries/") for text in groups(out.memory_md).values())
    assert sizes == [1] * 10 + [2, 8]  # the ten that share main.py: capped at 8 a group


def _as(name: str, rollout_id: str, updated_at: str) -> SelectedMemory:
    memory = selected(name)
    ref = replace(memory.ref, rollout_id=rollout_id, updated_at=updated_at)
    return replace(memory, ref=ref, raw_memory=memory.raw_memory.replace(name, rollout_id))


def test_a_one_off_edit_is_no_general_tip_until_two_conversations_use_it() -> None:
    """Issue 29: ``... > reports/x.tsv`` worked once; that is a fact of one task (kept in
    MEMORY.md), not advice for every run. Two conversations make it a tip."""
    command = "`mkdir -p reports && python scripts/aov.py data/orders.csv > reports/aov_by_region"
    once = consolidate(inputs(["data_analysis"]))
    assert command in once.memory_md
    tips = once.memory_summary_md.split("## General tips", 1)[-1].split("\n## ", 1)[0]
    assert command not in tips
    twice = consolidate(
        replace(
            inputs([]),
            selected=[
                _as("data_analysis", "run-" + "a" * 32, "2025-06-10T00:00:00Z"),
                _as("data_analysis", "run-" + "b" * 32, "2025-06-11T00:00:00Z"),
            ],
        )
    )
    tips = twice.memory_summary_md.split("## General tips", 1)[-1].split("\n## ", 1)[0]
    assert command in tips


def test_the_summary_cites_long_rollout_ids_short() -> None:
    ids = [f"run-{i:x}" + "0123456789abcdef" * 2 for i in range(10, 15)]
    chosen = [
        _as("bugfix_invoice", rid, f"2025-06-{10 + n:02d}T00:00:00Z") for n, rid in enumerate(ids)
    ]
    out = consolidate(replace(inputs([]), selected=chosen))
    summary = out.memory_summary_md
    assert not any(rid in summary for rid in ids)  # no 32-hex id in the summary
    assert "(rollouts run-e0123456, run-d0123456, run-c0123456 and 2 more)" in summary
    assert all(rid in out.memory_md for rid in ids)  # MEMORY.md keeps them whole
