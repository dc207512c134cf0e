"""Compact phase-one rendering of rollouts (issue 9, figure 5).

The corpus facts (user messages, final answers, exit codes, paths, exceptions) are extracted here
straight from the JSON, independently of the renderer, and must all survive the rendering.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandmem._truncate import estimate_tokens
from sandmem.memory._render import (
    ParsedRollout,
    parse_rollout,
    render_rollout,
    rollout_terminal_summary,
)
from sandmem.memory.rollouts import INFRASTRUCTURE_TEXT

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "rollouts"
FILES = sorted(CORPUS.glob("*.jsonl"))
PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.M)
BASE64_BLOB = re.compile(r"[A-Za-z0-9+/]{200,}")


def _raw(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace")


def _render(path: Path) -> str:
    return render_rollout(parse_rollout(_raw(path)))


def _segments(text: str) -> Iterator[dict[str, Any]]:
    for line in text.split("\n"):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            yield data


def _items(text: str) -> Iterator[dict[str, Any]]:
    for segment in _segments(text):
        yield from segment["input"]
        yield from segment["generated_items"]


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [part["text"] for part in content if "text" in part]


def _calls(text: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        item["call_id"]: (item["name"], json.loads(item["arguments"]))
        for item in _items(text)
        if item.get("type") == "function_call"
    }


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_corpus_is_large_enough_and_modest() -> None:
    assert len(FILES) >= 10
    assert sum(path.stat().st_size for path in FILES) < 3_000_000


def test_corpus_matches_its_generator() -> None:
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "benchmarks" / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generated = module.build_corpus()
    assert sorted(generated) == [path.name for path in FILES]
    for path in FILES:
        assert generated[path.name] == _raw(path), f"regenerate with benchmarks/corpus.py: {path}"


def test_compact_rendering_is_at_most_half_the_raw_json() -> None:
    raw = sum(estimate_tokens(_raw(path)) for path in FILES)
    compact = sum(estimate_tokens(_render(path)) for path in FILES)
    assert compact <= 0.5 * raw, f"compact {compact} tokens vs raw {raw} tokens"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_user_messages_survive_in_full(path: Path) -> None:
    rendered = _render(path)
    messages = [
        text
        for item in _items(_raw(path))
        if item.get("role") == "user"
        for text in _texts(item["content"])
    ]
    assert messages
    for text in messages:
        assert text in rendered


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_final_answers_and_final_output_survive(path: Path) -> None:
    rendered = _render(path)
    for segment in _segments(_raw(path)):
        answers = [item for item in segment["generated_items"] if item.get("role") == "assistant"]
        if answers:
            for text in _texts(answers[-1]["content"]):
                assert text in rendered
        for text in _strings(segment.get("final_output")):
            assert text in rendered
        if isinstance(segment.get("final_output"), dict):
            for value in segment["final_output"].values():
                assert json.dumps(value) in rendered


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_exit_codes_commands_paths_and_errors_survive(path: Path) -> None:
    raw = _raw(path)
    rendered = _render(path)
    calls = _calls(raw)
    nonzero: Counter[int] = Counter()
    outputs = {i["call_id"]: i["output"] for i in _items(raw) if "output" in i}
    for call_id, output in outputs.items():
        match = re.match(
            r"(?:exit_code|Exit code): (-?\d+)\n", output if isinstance(output, str) else ""
        )
        if calls[call_id][0] == "exec_command" and match and int(match.group(1)) != 0:
            nonzero[int(match.group(1))] += 1
    for code, count in nonzero.items():
        assert rendered.count(f"(exit {code})") >= count
    for name, args in calls.values():
        if name == "exec_command":
            assert args["cmd"] in rendered
        if name == "apply_patch":
            paths = PATCH_PATH.findall(args["patch"])
            assert paths
            for file_path in paths:
                assert file_path in rendered
    for segment in _segments(raw):
        meta = segment["terminal_metadata"]
        if meta["exception_type"] == "ModelRequestError":  # a server error is no learning
            assert meta["exception_message"] not in rendered
            assert f"exception: {INFRASTRUCTURE_TEXT}" in rendered
            continue
        for value in (meta["exception_type"], meta["exception_message"]):
            assert value is None or value in rendered


def test_corpus_covers_failures_and_nonzero_exits() -> None:
    states = Counter(
        segment["terminal_metadata"]["terminal_state"]
        for path in FILES
        for segment in _segments(_raw(path))
    )
    assert {"completed", "failed", "max_turns_exceeded", "interrupted"} <= set(states)
    assert any("(exit 1)" in _render(path) for path in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_base64_payloads_are_replaced_by_a_size_note(path: Path) -> None:
    raw = _raw(path)
    rendered = _render(path)
    blobs = [m.group(0) for s in _strings(list(_items(raw))) for m in BASE64_BLOB.finditer(s)]
    for blob in blobs:
        assert blob[:120] not in rendered
    if blobs:
        assert re.search(r"\[base64 data( \(image/png\))?, \d+ bytes omitted\]", rendered)
    assert "data:image/png;base64,iVBOR" not in rendered


def test_base64_blob_and_images_in_the_corpus() -> None:
    rendered = _render(CORPUS / "base64-blob.jsonl")
    assert re.search(r"\[base64 data, \d{5} bytes omitted\]", rendered)
    image = _render(CORPUS / "image-view.jsonl")
    assert image.count("[input_image: [base64 data (image/png),") == 3


def test_repeated_outputs_are_collapsed() -> None:
    path = CORPUS / "repeated-ls.jsonl"
    rendered = _render(path)
    seen: set[str] = set()
    repeats = 0
    for item in _items(_raw(path)):
        if "output" in item:  # the same output but for the wall time of the run
            output = re.sub(r"(?m)^Wall time: .*\n", "", item["output"])
            repeats += output in seen and len(output) > 60
            seen.add(output)
    assert repeats >= 6
    assert rendered.count("(same output as step") == repeats
    assert rendered.count("pnpm-lock.yaml") == 1  # the `ls -la` listing is shown once
    assert "[9] output (exit 0): (same output as step 3)" in rendered


def test_long_logs_keep_head_tail_and_error_lines_from_the_middle() -> None:
    log = [f"tests/test_mod.py::test_case_{n} PASSED" for n in range(3000)]
    log[1500] = "tests/test_mod.py::test_case_1500 FAILED"
    log[1501] = "E       KeyError: 'currency'"
    rendered = render_rollout(_one_exec("pytest -v", 1, "\n".join(log)))
    assert "test_case_0 PASSED" in rendered and "test_case_2999 PASSED" in rendered
    assert "test_case_1000 PASSED" not in rendered
    assert "L1501: tests/test_mod.py::test_case_1500 FAILED" in rendered
    assert "L1502: E       KeyError: 'currency'" in rendered
    assert "lines (" in rendered and "of output omitted" in rendered
    assert "(exit 1)" in rendered
    assert estimate_tokens(rendered) < 1_400


def test_compiler_errors_in_the_middle_of_a_build_log_survive() -> None:
    rendered = _render(CORPUS / "build-log.jsonl")
    assert "--error-format" not in rendered.split("error-like lines among them:")[1][:200]
    for line in (
        "error[E0308]: mismatched types",
        "--> src/parser.rs:212:17",
        "error[E0599]: no method named `complete` found for enum `nom::Err`",
        "error: could not compile `confparse` (lib) due to 2 previous errors",
    ):
        assert line in rendered


def test_per_item_budget_is_configurable() -> None:
    output = "\n".join(f"row {n},{n * 3},{n * 7}" for n in range(20_000))
    small = render_rollout(_one_exec("cat data.csv", 0, output), per_item_tokens=100)
    large = render_rollout(_one_exec("cat data.csv", 0, output), per_item_tokens=5_000)
    assert estimate_tokens(small) < 250 < 3_500 < estimate_tokens(large) < 5_300


def test_single_huge_line_falls_back_to_a_byte_cut() -> None:
    rendered = render_rollout(_one_exec("cat min.js", 0, "var a=1;" * 50_000))
    assert "output truncated" in rendered
    assert estimate_tokens(rendered) < 1_200


def test_binary_ansi_and_progress_output() -> None:
    binary = "\x00\x01\ufffd\ufffdPNG\x02\x03" * 100
    assert "[binary data, " in render_rollout(_one_exec("cat logo.png", 0, binary))
    progress = "\x1b[32mok\x1b[0m\n" + "\r".join(f"{p}%" for p in range(0, 101, 10)) + "\ndone"
    rendered = render_rollout(_one_exec("npm ci", 0, progress))
    assert "ok\n100%\ndone" in rendered and "\x1b" not in rendered and "50%" not in rendered


def test_base64_heuristic_spares_paths_hex_and_words() -> None:
    hex_digest = "ab12" * 80
    path = "/".join(["src", "pkg", "module"] * 30)
    words = "\n".join(["alpha", "beta", "gamma"] * 50)
    rendered = render_rollout(
        _one_exec("show", 0, f"{hex_digest}\n{path}\n{words}"), per_item_tokens=5_000
    )
    assert hex_digest in rendered and path in rendered and words in rendered
    inline = "x=" + "QUJD" * 30 + "ZGVm" * 30 + "1a2B"
    assert "[base64 data, 244 bytes omitted]" in render_rollout(_one_exec("show", 0, inline))


def test_exit_code_parsing_is_tolerant() -> None:
    assert "output (exit 2): boom" in render_rollout(_one_exec("x", 2, "boom"))
    parsed = _rollout([_call("c1", "exec_command", cmd="make"), _output("c1", "Exit code: 3\nx")])
    assert "output (exit 3): x" in render_rollout(parsed)
    shell = (
        "Exit code: 2\nWall time: {} s\nNote: output was cut\nOutput:\n" + "make: *** Error 2\n" * 3
    )
    parsed = _rollout(
        [
            _call("c1", "exec_command", cmd="make"),
            _output("c1", shell.format("0.4")),
            _call("c2", "exec_command", cmd="make"),
            _output("c2", shell.format("0.7")),
        ]
    )
    rendered = render_rollout(parsed)
    assert "[2] output (exit 2):\nNote: output was cut\nmake: *** Error 2\n" in rendered
    assert "Wall time" not in rendered and "Output:" not in rendered
    assert "[4] output (exit 2): (same output as step 2)" in rendered
    timeout = "Command timed out after 500 ms and was killed.\nWall time: 0.5 s\nOutput: (none)"
    parsed = _rollout([_call("c1", "exec_command", cmd="sleep 9"), _output("c1", timeout)])
    assert "[2] output: Command timed out after 500 ms and was killed." in render_rollout(parsed)
    parsed = _rollout([_call("c1", "exec_command", cmd="make"), _output("c1", "plain text")])
    assert "[2] output: plain text" in render_rollout(parsed)
    parsed = _rollout([_call("c1", "exec_command", cmd="true"), _output("c1", "exit_code: 0\n")])
    assert "[2] output (exit 0): (no output)" in render_rollout(parsed)


def test_apply_patch_shows_every_file_and_a_bounded_excerpt() -> None:
    body = "".join(f"+line {n}\n" for n in range(4000))
    patch = (
        "*** Begin Patch\n*** Add File: docs/new.md\n" + body + "*** Update File: a/old.py\n"
        "*** Move to: a/new.py\n@@\n-x\n+y\n*** Delete File: a/gone.py\n*** End Patch\n"
    )
    rendered = render_rollout(_rollout([_call("p1", "apply_patch", patch=patch)]))
    assert (
        "call apply_patch: add docs/new.md; update a/old.py; move to a/new.py; delete a/gone.py"
    ) in rendered
    assert "line 2000" not in rendered and estimate_tokens(rendered) < 1_200
    custom = {"type": "custom_tool_call", "call_id": "p2", "name": "apply_patch", "input": patch}
    assert "delete a/gone.py" in render_rollout(_rollout([custom]))


def test_other_tools_messages_and_dropped_items() -> None:
    items: list[dict[str, Any]] = [
        {"role": "system", "content": "SYSTEM PROMPT"},
        {"type": "reasoning", "summary": [{"text": "SECRET THOUGHTS"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "look at this"}]},
        _call("c1", "search_docs", query="poetry groups", limit=3),
        _call("c2", "view_image", path="shots/a.png"),
        _output("c1", "found 2 pages"),
        {"type": "web_search_call", "id": "ws1", "status": "completed"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "All good."}]},
    ]
    rendered = render_rollout(_rollout(items))
    assert "SYSTEM PROMPT" not in rendered and "SECRET THOUGHTS" not in rendered
    assert "[1] user: look at this" in rendered
    assert "[2] call search_docs: query=poetry groups, limit=3" in rendered
    assert "[3] call view_image: path=shots/a.png" in rendered
    assert "[4] output of step 2: found 2 pages" in rendered
    assert '[5] web_search_call: {"type":"web_search_call"' in rendered
    assert "[6] assistant (final answer): All good." in rendered


def test_segments_headers_exceptions_and_interruptions() -> None:
    text = _raw(CORPUS / "approval-interrupted.jsonl")
    rendered = render_rollout(parse_rollout(text))
    assert (
        "=== segment 1 of 2 | updated_at 2025-05-11T09:32:00+00:00 | terminal_state interrupted"
        in rendered
    )
    assert "interruptions (awaiting approval): [" in rendered
    assert "[10] output of step 8: billing-api restarted" in rendered
    assert "user (final answer)" not in rendered
    failed = _render(CORPUS / "failed-run.jsonl")
    assert f"exception: {INFRASTRUCTURE_TEXT}" in failed
    assert "rate limit reached" not in failed  # a 429 says nothing about the task
    assert "Command timed out after 600000 ms and was killed." in failed
    assert "assistant (last message)" in failed


def test_session_history_replay_is_collapsed_but_new_turns_are_not() -> None:
    rendered = _render(CORPUS / "multi-segment.jsonl")
    assert "(input replays 10 earlier items as history: steps 1-10)" in rendered
    assert rendered.count("GET /health returns 500 when Redis is down") == 1
    first: dict[str, Any] = {"role": "user", "content": "continue"}
    answer: dict[str, Any] = {"role": "assistant", "content": "ok"}
    parsed = _rollout([first, answer], [first])  # the new turn repeats an old message
    assert render_rollout(parsed).count("user: continue") == 2


def test_malformed_lines_are_skipped_and_counted() -> None:
    good = json.dumps({"rollout_id": "r1", "input": "hi", "generated_items": []})
    text = "\n".join(["{not json", good, "[1, 2]", "", '{"other": 1}', good[:20], good, "  "])
    parsed = parse_rollout(text)
    assert parsed.malformed_lines == 4
    assert len(parsed.segments) == 2
    assert [s.line_number for s in parsed.segments] == [2, 7]
    assert parsed.segments[0].input == [{"type": "message", "role": "user", "content": "hi"}]
    assert "4 malformed line(s) skipped" in render_rollout(parsed)
    torn = parse_rollout(_raw(CORPUS / "refactor-torn-write.jsonl"))
    assert torn.malformed_lines == 1 and len(torn.segments) == 1


def test_odd_input_is_tolerated() -> None:
    lone = '{"input": [{"role": "user", "content": "bad \\ud800 char"}], "generated_items": 5}'
    emoji = '{"input": [{"role": "user", "content": "ok \\ud83d\\ude00"}]}'
    text = "\n".join([lone, emoji, '{"input": [1, "x", {"role": "user", "content": null}]}'])
    rendered = render_rollout(parse_rollout(text))
    assert "bad ? char" in rendered and "ok \U0001f600" in rendered
    assert "terminal_state unknown" in rendered and "updated_at unknown" in rendered
    assert render_rollout(parse_rollout("")) == "rollout unknown: 0 segment(s)\n"
    with pytest.raises(ValueError):
        render_rollout(parse_rollout(""), max_tokens=0)


def test_overall_cap_applies_after_compaction() -> None:
    messages = [{"role": "user", "content": f"message {n}: " + "word " * 200} for n in range(900)]
    parsed = _rollout(messages)
    rendered = render_rollout(parsed)
    assert "[... rollout transcript truncated:" in rendered
    assert estimate_tokens(rendered) <= 150_000 + 60
    assert "message 0:" in rendered and "message 899:" in rendered
    small = render_rollout(parsed, max_tokens=2_000)
    assert "[... rollout transcript truncated:" in small
    assert estimate_tokens(small) <= 2_000 + 60


def test_rendering_is_deterministic() -> None:
    for path in FILES:
        text = _raw(path)
        assert render_rollout(parse_rollout(text)) == render_rollout(parse_rollout(text))


def test_terminal_summary() -> None:
    summary = rollout_terminal_summary(parse_rollout(_raw(CORPUS / "max-turns.jsonl")))
    assert summary == {
        "segment_count": 2,
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
        "terminal_states": ["max_turns_exceeded", "completed"],
        "updated_at": "2025-05-07T08:04:00+00:00",
        "malformed_lines": 0,
    }
    empty = rollout_terminal_summary(parse_rollout("garbage"))
    assert empty["segment_count"] == 0 and empty["malformed_lines"] == 1
    assert empty["terminal_metadata"] == {} and empty["updated_at"] is None


# --- helpers -------------------------------------------------------------------------------


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
    }


def _output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _rollout(*segments: list[dict[str, Any]]) -> ParsedRollout:
    lines = [
        json.dumps(
            {
                "updated_at": f"2025-01-0{n + 1}T00:00:00+00:00",
                "rollout_id": "r",
                "input": items[:1],
                "generated_items": items[1:],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        )
        for n, items in enumerate(segments)
    ]
    return parse_rollout("\n".join(lines))


def _one_exec(cmd: str, code: int, output: str) -> ParsedRollout:
    return _rollout(
        [
            {"role": "user", "content": "go"},
            _call("c1", "exec_command", cmd=cmd),
            _output("c1", f"exit_code: {code}\n{output}"),
        ]
    )


def test_the_cheap_line_tests_agree_with_the_full_patterns() -> None:
    """``_is_error`` / ``_is_location`` pre-filter lines before the regexes: on every line of
    the corpus (and a few edge cases) they decide exactly as the full patterns do."""
    from sandmem.memory._render_text import (
        _ERROR_LINE,
        _LOCATION_LINE,
        _is_error,
        _is_location,
    )

    lines = [
        "E   assert 1 == 2",
        "ValueError: bad",
        "TIMED OUT after 30 s",
        "\u017fegmentation fault (core dumped)",  # a long s: casefolds to "s"
        '  File "app.py", line 3, in <module>',
        "src/app.py:12: warning",
        "tests/test_x.py::test_y PASSED",
    ]
    for path in sorted((Path(__file__).parents[1] / "data" / "rollouts").glob("*.jsonl")):
        for segment in path.read_text(encoding="utf-8").splitlines():
            lines.extend(segment.replace("\\n", "\n").split("\n"))
    for line in lines:
        assert _is_error(line) == bool(_ERROR_LINE.search(line)), line
        assert _is_location(line) == bool(_LOCATION_LINE.search(line)), line


_LINE_PIECES = (
    "E", "E   assert x == 1", "Error", "ERROR", "error:", "FAILED", "failure", "Traceback",
    "timed out", "TimeOut", "could not", "Not Found", "cannot", "panicked", "denied",
    "ValueError", "MyException", "ß", "İ", "ﬁle", "ǅ", "K", "src/app.py:12", ":3",
    'File "x.py", line 3', "  ", "ok", "PASSED", "tests/t.py::test_1", "\r", "é", "…",
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(_LINE_PIECES) | st.text(max_size=6), max_size=5).map(" ".join),
        max_size=30,
    )
)
def test_error_and_location_lines_are_those_each_line_tested_alone_gives(
    lines: list[str],
) -> None:
    """``_marked_lines`` looks for the cheap tests' words once over the joined lines: it marks
    the lines that ``_is_error`` and ``_is_location`` mark one by one."""
    from sandmem.memory import _render_text as rt

    lines = [line.replace("\n", " ") for line in lines]
    errors = {i for i, line in enumerate(lines) if rt._is_error(line)}
    places = {i for i, line in enumerate(lines) if i not in errors and rt._is_location(line)}
    assert rt._marked_lines(lines) == (errors, places)
