"""Ranked memory search: section splitting, query sanitising, BM25 ranking, reading a layout."""

from __future__ import annotations

import pytest

from sandmem import UserError
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views._search import (
    MAX_QUERY_TERMS,
    SNIPPET_CHARS,
    _connect,
    query_terms,
    search_layout,
    search_memory,
    split_sections,
)
from sandmem.sandboxes import File, Manifest, UnixLocalSandboxClient

MEMORY = """# Memory

Intro text about this workspace.

## Invoice totals
Keywords: invoice, tax
- The total multiplies the tax rate.

### Rounding
- Round once at the end.

```bash
# not a heading: a comment in a code block
pytest -q tests/test_invoice.py
```

## Deployments
Keywords: deploy, staging
- Deploying needs the VPN.
"""


def test_split_sections_at_headings_outside_code() -> None:
    sections = split_sections("m/MEMORY.md", MEMORY)
    assert [(s.start, s.heading, s.title) for s in sections] == [
        (1, "Memory", "Memory"),
        (5, "Memory > Invoice totals", "Invoice totals"),
        (9, "Memory > Invoice totals > Rounding", "Rounding"),
        (17, "Memory > Deployments", "Deployments"),
    ]
    rounding = sections[2]
    assert rounding.lines[0] == "### Rounding"
    assert "# not a heading: a comment in a code block" in rounding.lines
    assert sum(len(s.lines) for s in sections) == len(MEMORY.splitlines())


def test_split_sections_preamble_and_blank_text() -> None:
    assert [s.heading for s in split_sections("a.md", "text first\n# H\nbody\n")] == [None, "H"]
    assert split_sections("a.md", "") == []
    assert split_sections("a.md", "\n\n") == []
    assert [s.title for s in split_sections("a.md", "#not-a-heading\n## Real ##\n")] == ["", "Real"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("invoice tax", ["invoic", "tax"]),
        ('"unbalanced AND (', ["unbalanc", "and"]),
        ("NEAR(a b) OR col:x", ["near", "a", "b", "or", "col", "x"]),
        ("Tax tax TAX taxes", ["tax"]),
        ("***  ^-", []),
        ("", []),
        ("snake_case naïve", ["snake", "case", "naiv"]),
    ],
)
def test_query_terms_are_stemmed_words_never_syntax(query: str, expected: list[str]) -> None:
    conn = _connect()
    try:
        assert query_terms(conn, query) == expected
    finally:
        conn.close()


def test_query_terms_are_capped() -> None:
    conn = _connect()
    try:
        terms = query_terms(conn, " ".join(f"w{i}" for i in range(100)))
    finally:
        conn.close()
    assert terms == [f"w{i}" for i in range(MAX_QUERY_TERMS)]


def test_best_section_first_with_its_best_line() -> None:
    hits = search_memory({"m/MEMORY.md": MEMORY}, "invoice tax rate")
    assert hits[0].heading == "Memory > Invoice totals"
    assert (hits[0].path, hits[0].line) == ("m/MEMORY.md", 6)
    assert hits[0].snippet == "Keywords: invoice, tax"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)


def test_stemming_and_heading_weight() -> None:
    hits = search_memory({"m/MEMORY.md": MEMORY}, "deploy")
    assert hits[0].heading == "Memory > Deployments"  # "Deploying" stems like "deploy"
    rounding = search_memory({"m/MEMORY.md": MEMORY}, "rounded")
    assert rounding[0].heading == "Memory > Invoice totals > Rounding"
    assert rounding[0].line == 9


def test_a_parent_heading_does_not_make_subsections_match() -> None:
    text = "# Invoices\nabout invoices\n## Other\nunrelated words\n"
    hits = search_memory({"a.md": text}, "invoices")
    assert [h.heading for h in hits] == ["Invoices"]


def test_ranking_across_files_and_limit() -> None:
    files = {
        "m/MEMORY.md": "## Billing\n- invoices are created nightly\n",
        "m/rollout_summaries/r1_fix.md": "# Fix invoice tax\n- invoice tax: now multiplied\n",
        "m/skills/deploy/SKILL.md": "# Deploy\n1. run make deploy\n",
    }
    hits = search_memory(files, "invoice tax")
    assert [h.path for h in hits] == ["m/rollout_summaries/r1_fix.md", "m/MEMORY.md"]
    assert len(search_memory(files, "invoice tax", limit=1)) == 1
    with pytest.raises(UserError, match="at least 1"):
        search_memory(files, "x", limit=0)


def test_no_words_or_no_match_gives_no_hits() -> None:
    assert search_memory({"a.md": MEMORY}, "!!!") == []
    assert search_memory({"a.md": MEMORY}, "kubernetes") == []
    assert search_memory({}, "invoice") == []


def test_hostile_queries_never_raise() -> None:
    for query in ('"', "AND", "a OR", "NOT b", "x*", "^start", "col:val", "(((", "NEAR(x y, 2)"):
        search_memory({"a.md": MEMORY}, query)


def test_long_lines_are_cut_in_snippets() -> None:
    text = "# H\n" + "invoice " * 100 + "\n"
    [hit] = search_memory({"a.md": text}, "invoice")
    assert len(hit.snippet) == SNIPPET_CHARS and hit.snippet.endswith("…")


async def test_search_layout_reads_memory_summaries_and_skills() -> None:
    summary = (
        "session_id: invoice-fix\nupdated_at: 2024-01-01T00:00:00Z\nrollout_path: s/x.jsonl\n"
        "terminal_state: completed\n\n# Fix\n- the invoice tax is multiplied\n"
    )
    manifest = Manifest(
        entries={
            "mem/MEMORY.md": File(content="## Billing\n- see the invoice summary\n"),
            "mem/memory_summary.md": File(content="invoice everywhere\n"),
            "mem/raw_memories/invoice-fix.md": File(content="invoice\n"),
            "mem/rollout_summaries/invoice-fix_fix.md": File(content=summary),
            "mem/skills/billing/SKILL.md": File(content="# Billing\nInvoice steps\n"),
            "mem/skills/billing/.hidden.md": File(content="invoice\n"),
        }
    )
    async with await UnixLocalSandboxClient().create(manifest=manifest) as session:
        hits = await search_layout(session, MemoryPaths("mem", "sess"), "invoice")
        paths = {h.path for h in hits}
        assert paths == {
            "mem/MEMORY.md",
            "mem/rollout_summaries/invoice-fix_fix.md",
            "mem/skills/billing/SKILL.md",
        }
        summary_hit = next(h for h in hits if h.path.startswith("mem/rollout_summaries/"))
        assert summary_hit.line == 7  # line numbers count the (unsearched) header
        ids = await search_layout(session, MemoryPaths("mem", "sess"), "completed session_id")
        assert ids == []  # the metadata header is not searched
        empty = await search_layout(session, MemoryPaths("none", "sess"), "invoice")
        assert empty == []


def test_a_word_in_most_sections_still_ranks_them() -> None:
    # FTS5's bm25() floors the weight of a word found in most documents at 1e-6, so every
    # hit here used to score the same 3e-06; BM25 with a positive idf tells them apart
    text = (
        "# Invoice totals\n- the invoice total multiplies the invoice tax\n"
        "# Exports\n- the invoice export runs nightly and writes a long csv file to disk\n"
        "# Billing\n- invoices\n"
    )
    hits = search_memory({"m/MEMORY.md": text}, "invoice")
    assert [h.heading for h in hits] == ["Invoice totals", "Billing", "Exports"]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == 3 and min(scores) > 0.01
    both = search_memory({"m/MEMORY.md": text}, "invoice nightly")
    assert both[0].heading == "Exports"  # the rarer word decides
    assert both[0].snippet == "- the invoice export runs nightly and writes a long csv file to disk"
