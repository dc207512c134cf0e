"""The test infrastructure itself: the network guard and the fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import pytest
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest
from openai import AsyncOpenAI

BLOCKED = "only loopback is allowed"


def test_guard_blocks_non_loopback_hosts(_no_network: list[str]) -> None:
    with pytest.raises(OSError, match=BLOCKED):
        socket.create_connection(("api.openai.com", 443), timeout=1)
    with socket.socket() as sock, pytest.raises(OSError, match=BLOCKED):
        sock.connect(("10.1.2.3", 80))
    with socket.socket(socket.AF_INET6) as sock:
        with pytest.raises(OSError, match=BLOCKED):
            sock.connect_ex(("2001:db8::1", 80, 0, 0))
    assert len(_no_network) == 3
    _no_network.clear()  # the attempts were the point of this test


async def test_guard_fails_a_test_even_when_the_client_swallows_it(
    _no_network: list[str],
) -> None:
    async with AsyncOpenAI(api_key="k", base_url="http://192.0.2.1/v1", max_retries=0) as client:
        with pytest.raises(Exception, match="Connection error"):
            await client.responses.create(model="m", input="x")
    assert _no_network  # the fixture would now fail the test
    _no_network.clear()


def test_guard_allows_loopback_and_unix(fake_openai: FakeOpenAIServer) -> None:
    for host in ("127.0.0.1", "localhost"):
        socket.create_connection((host, fake_openai.port), timeout=1).close()
    left, right = socket.socketpair()
    left.close()
    right.close()


def post(server: FakeOpenAIServer, path: str, body: dict[str, object]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        server.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        data = exc.read()
        exc.close()
        return exc.code, data


def test_request_helpers_for_both_apis(fake_openai: FakeOpenAIServer) -> None:
    post(
        fake_openai,
        "/responses",
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "first"}]},
                {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "out"},
                {"role": "user", "content": "second"},
            ],
            "tools": [{"type": "function", "name": "t", "parameters": {}}],
            "text": {"format": {"type": "json_schema", "name": "S", "schema": {}, "strict": True}},
        },
    )
    post(
        fake_openai,
        "/chat/completions",
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "first"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "t", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "out"},
                {"role": "user", "content": "second"},
            ],
            "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "S", "schema": {}, "strict": True},
            },
        },
    )
    for req, api in zip(fake_openai.requests, ["responses", "chat"], strict=True):
        assert req.api == api
        assert req.instructions == "sys"
        assert req.last_user_text() == "second"
        assert req.tool_names() == ["t"]
        assert req.json_schema() == {"name": "S", "schema": {}, "strict": True}
        assert req.tool_outputs() == {"c1": "out"}
        assert req.tool_calls() == [("t", "{}", "c1")]


def test_faults_apply_in_order_then_stop(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.inject(status=500, times=2)
    fake_openai.inject(malformed=True)
    codes = [post(fake_openai, "/responses", {"model": "m", "input": "x"}) for _ in range(4)]
    assert [code for code, _ in codes] == [500, 500, 200, 200]
    with pytest.raises(json.JSONDecodeError):
        json.loads(codes[2][1])
    assert json.loads(codes[3][1])["output"][0]["content"][0]["text"] == "echo: x"
    assert len(fake_openai.requests) == 4


def test_unknown_path_is_404(fake_openai: FakeOpenAIServer) -> None:
    assert post(fake_openai, "/embeddings", {})[0] == 404


def test_handler_errors_are_reported_not_retried(fake_openai: FakeOpenAIServer) -> None:
    def broken(req: FakeRequest) -> FakeReply:
        raise RuntimeError("script bug")

    fake_openai.handler = broken
    assert post(fake_openai, "/responses", {"model": "m", "input": "x"})[0] == 400
    assert "script bug" in fake_openai.handler_errors[0]
    fake_openai.handler_errors.clear()


async def test_in_flight_counts_concurrent_requests(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = lambda req: FakeReply(text="slow", delay_s=0.1)
    async with AsyncOpenAI(api_key="k", base_url=fake_openai.base_url, max_retries=0) as client:
        await asyncio.gather(
            *(client.chat.completions.create(model="m", messages=[]) for _ in range(4))
        )
        assert fake_openai.max_in_flight == 4
        assert fake_openai.in_flight == 0
        fake_openai.reset()
        await client.chat.completions.create(model="m", messages=[])
        await client.chat.completions.create(model="m", messages=[])
    assert fake_openai.max_in_flight == 1
