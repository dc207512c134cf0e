"""SPEC §3.5 phase one: prompt, input rendering, artifact rules, headers."""

from __future__ import annotations

import json

import pytest

from sandmem import MemoryGenerationError
from sandmem._truncate import BYTES_PER_TOKEN
from sandmem.memory._types import PhaseOneArtifacts
from sandmem.memory.generation.phase_one import (
    ROLLOUT_MAX_TOKENS,
    instructions,
    normalize_slug,
    render_input,
    validate_artifacts,
)
from sandmem.memory.layout import (
    RolloutFingerprint,
    fingerprint,
    is_up_to_date,
    parse_header,
    render_with_header,
)


def art(slug: str, summary: str, raw: str) -> PhaseOneArtifacts:
    return PhaseOneArtifacts(rollout_slug=slug, rollout_summary=summary, raw_memory=raw)


def test_all_empty_is_skip() -> None:
    assert validate_artifacts(art("", " ", "\n"), "r") is None


@pytest.mark.parametrize(
    ("slug", "summary", "raw"), [("s", "", "x"), ("", "x", "x"), ("s", "x", " ")]
)
def test_partly_empty_is_error(slug: str, summary: str, raw: str) -> None:
    with pytest.raises(MemoryGenerationError) as info:
        validate_artifacts(art(slug, summary, raw), "r9")
    assert info.value.rollout_id == "r9"


@pytest.mark.parametrize("slug", ["../../x", "Fix-Bug", "-x", "a b", "x" * 81, "a/b", "é"])
def test_bad_slugs_are_errors(slug: str) -> None:
    with pytest.raises(MemoryGenerationError):
        validate_artifacts(art(slug, "s", "r"), "r")


def test_slug_normalised() -> None:
    assert normalize_slug("  fix-bug.md ") == "fix-bug"
    result = validate_artifacts(art(" fix_bug-2.md", " summary ", " raw "), "r")
    assert result == art("fix_bug-2", "summary", "raw")
    assert validate_artifacts(art("x" * 80, "s", "r"), "r") is not None


def test_instructions_extra_prompt_block() -> None:
    plain = instructions("r1", None)
    assert "(rollout r1)" in plain and "{" not in plain
    assert "extra guidance" not in plain.lower()
    extra = instructions("r1", "Note customer names.")
    assert "## Developer-specific extra guidance\n\nNote customer names." in extra
    assert "untrusted" in plain and "secrets" in plain


def _segment(text: str, state: str = "completed") -> str:
    return json.dumps(
        {
            "updated_at": "2026-01-01T00:00:00Z",
            "rollout_id": "r",
            "input": [{"role": "user", "content": text}],
            "generated_items": [],
            "terminal_metadata": {
                "terminal_state": state,
                "exception_type": None,
                "exception_message": None,
                "has_final_output": False,
            },
        }
    )


def test_render_input_fences_transcript_and_metadata() -> None:
    rendered = render_input("r", _segment("fix the bug") + "\n" + _segment("again", "failed"))
    assert rendered.index("Terminal metadata") < rendered.index("<transcript>")
    assert "fix the bug" in rendered and rendered.rstrip().endswith("</transcript>")
    assert '"failed"' in rendered
    # one compact JSON line (no spaces after separators): two segments, the last one failed
    meta_line = next(line for line in rendered.splitlines() if line.startswith("Terminal"))
    assert '"segment_count":2' in meta_line and '"terminal_state":"failed"' in meta_line


def test_long_rollout_truncated_head_tail_with_marker() -> None:
    big = "START " + "x" * (ROLLOUT_MAX_TOKENS * BYTES_PER_TOKEN * 2) + " END"
    rendered = render_input("r", _segment(big))
    assert len(rendered.encode()) <= ROLLOUT_MAX_TOKENS * BYTES_PER_TOKEN + 2_000
    assert "START" in rendered and "END" in rendered
    assert "truncated" in rendered and "omitted" in rendered


def test_headers_round_trip() -> None:
    text = render_with_header({"rollout_id": "r", "updated_at": "t 1\nx"}, "body\n\nmore\n")
    assert text == "rollout_id: r\nupdated_at: t 1 x\n\nbody\n\nmore\n"
    fields, body = parse_header(text)
    assert fields == {"rollout_id": "r", "updated_at": "t 1 x"}
    assert body == "body\n\nmore\n"


def test_fingerprint_and_up_to_date() -> None:
    data = (_segment("a") + "\nnot json\n" + _segment("b", "failed") + "\n").encode()
    fp = fingerprint(data)
    assert fp == RolloutFingerprint(3, "2026-01-01T00:00:00Z", "failed")
    raw = render_with_header({"updated_at": fp.updated_at, "segments": "3"}, "x")
    assert is_up_to_date(raw, fp)
    assert not is_up_to_date(raw, RolloutFingerprint(4, fp.updated_at, "failed"))
    assert not is_up_to_date(None, fp)


async def test_the_rollout_is_rendered_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendering a long rollout is CPU work: it runs in a worker thread, not on the loop."""
    import threading

    from sandmem.memory import MemoryGenerateConfig
    from sandmem.memory.generation import phase_one
    from sandmem.models._provider import OpenAIProvider
    from sandmem.testing import FunctionModel

    threads: list[threading.Thread] = []

    def recording(*args: object) -> str:
        threads.append(threading.current_thread())
        return render_input(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(phase_one, "render_input", recording)
    reply = json.dumps({"rollout_slug": "s", "rollout_summary": "sum", "raw_memory": "raw"})
    model = FunctionModel(lambda request: [{"role": "assistant", "content": reply}])
    config = MemoryGenerateConfig(phase_one_model=model)
    artifacts = await phase_one.call_model("r", _segment("hello"), config, OpenAIProvider())
    assert artifacts.raw_memory == "raw"
    assert threads and threads[0] is not threading.current_thread()
