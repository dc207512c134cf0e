"""``sandmem eval`` with a named model through the real openai client: the report's requests
and tokens are those the (fake) server saw and answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem.eval import EvalOptions, parse_suite, run_eval
from sandmem.models import OpenAIProvider

_SUITE = """
name = "served"
[[task]]
id = "files"
[task.files]
"README.md" = "# x"
[[task.step]]
prompt = "Create hello.txt containing hello."
check = "grep -qx hello hello.txt"
[[task.step]]
prompt = "Create bye.txt containing bye."
check = "grep -qx bye bye.txt"
correction = "Please create bye.txt now."
"""


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
async def test_report_matches_the_server_request_log(
    fake_openai: FakeOpenAIServer, tmp_path: Path, api: str
) -> None:
    answered: list[tuple[int, int]] = []

    def handler(req: FakeRequest) -> FakeReply:
        prompt = req.last_user_text()
        done = bool(req.tool_outputs())
        if "hello" in prompt and not done:
            reply = FakeReply(
                tool_calls=[("exec_command", {"cmd": "echo hello > hello.txt"}, "c1")]
            )
        elif "now" in prompt and not done:  # only the correction makes it act
            reply = FakeReply(tool_calls=[("exec_command", {"cmd": "echo bye > bye.txt"}, "c2")])
        else:
            reply = FakeReply(text="done")
        reply.input_tokens = 40 + len(req.items)
        reply.output_tokens = 3 + len(answered)
        answered.append((reply.input_tokens, reply.output_tokens))
        return reply

    fake_openai.handler = handler
    provider = OpenAIProvider(api_key="test", base_url=fake_openai.base_url, api=api)  # type: ignore[arg-type]
    options = EvalOptions(
        out=tmp_path,
        model="served-model",
        memory_model="extractive",
        conditions=("memory", "no-memory"),
        provider=provider,
    )
    try:
        report = await run_eval(parse_suite(_SUITE), options)
    finally:
        await provider.aclose()
    steps = [step for cell in report.cells for step in cell.steps]
    assert all(step.success for step in steps)
    assert sum(step.interventions for step in steps) == 2  # step 2, once per condition
    assert sum(step.requests for step in steps) == len(fake_openai.requests) == len(answered)
    assert sum(step.input_tokens for step in steps) == sum(i for i, _ in answered)
    assert sum(step.output_tokens for step in steps) == sum(o for _, o in answered)
    assert sum(step.tool_calls for step in steps) == 4
    assert {req.model for req in fake_openai.requests} == {"served-model"}
