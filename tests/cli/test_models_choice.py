"""One model setting: ``--model`` / ``SANDMEM_MODEL`` for the agent, and what memory uses."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from cli_workspaces import invoke, memory_server_handler
from fake_openai import FakeOpenAIServer, FakeRequest

from sandmem.cli._models import choose_models, is_openai_server

OPENAI = "https://api.openai.com/v1"
LOCAL = "http://localhost:11434/v1"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SANDMEM_MODEL", "SANDMEM_MEMORY_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("env", "flags", "agent", "memory"),
    [
        # nothing chosen, OpenAI's server: the documented defaults for memory
        ({"OPENAI_BASE_URL": OPENAI}, (None, None), "gpt-5.4-mini", None),
        ({}, (None, None), "gpt-5.4-mini", None),
        # the agent's model chosen by flag or environment: memory follows it
        ({}, ("m1", None), "m1", "m1"),
        ({"SANDMEM_MODEL": "qwen3:8b"}, (None, None), "qwen3:8b", "qwen3:8b"),
        ({"SANDMEM_MODEL": "qwen3:8b"}, ("m1", None), "m1", "m1"),
        # a server that is not OpenAI's: the agent's (default) model for memory too
        ({"OPENAI_BASE_URL": LOCAL}, (None, None), "gpt-5.4-mini", "gpt-5.4-mini"),
        # the memory model, by flag or environment, wins
        ({"SANDMEM_MEMORY_MODEL": "small"}, ("m1", None), "m1", "small"),
        ({"SANDMEM_MEMORY_MODEL": "small"}, ("m1", "tiny"), "m1", "tiny"),
        ({"OPENAI_BASE_URL": LOCAL}, (None, "tiny"), "gpt-5.4-mini", "tiny"),
    ],
)
def test_choose_models(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    flags: tuple[str | None, str | None],
    agent: str,
    memory: str | None,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    choice = choose_models(flags[0], flags[1], "model")
    assert (choice.agent, choice.memory) == (agent, memory)
    config = choice.memory_config()
    if memory is None:
        assert (config.phase_one_model, config.phase_two_model) == ("gpt-5.4-mini", "gpt-5.5")
        assert config.phase_one_model_settings is not None
    else:
        assert (config.phase_one_model, config.phase_two_model) == (memory, memory)
        assert config.phase_one_model_settings is None  # the server's defaults


def test_extractive_engine_wins_for_memory() -> None:
    choice = choose_models("m1", None, "extractive")
    assert (choice.agent, choice.memory) == ("m1", "extractive")
    assert choice.memory_config().phase_two_model == "extractive"
    with pytest.raises(click.UsageError):
        choose_models("m1", "m2", "extractive")


def test_openai_servers() -> None:
    assert is_openai_server(OPENAI) and is_openai_server("https://eu.api.openai.com/v1")
    assert not is_openai_server(LOCAL)
    assert not is_openai_server("https://notopenai.com/v1")


def test_sandmem_model_drives_agent_and_memory(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = memory_server_handler("hi")
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "SANDMEM_MODEL": "qwen3:8b"}
    result = invoke("run", "-w", tmp_path, "Say hi", env=env)
    assert result.exit_code == 0, result.output
    assert {r.model for r in fake_openai.requests} == {"qwen3:8b"}
    assert any(r.wants_json() for r in fake_openai.requests)  # phase one used it too
    first = result.stderr.splitlines()[0]
    assert first.startswith("sandmem: agent: qwen3:8b (SANDMEM_MODEL); memory: qwen3:8b (")
    assert fake_openai.base_url in first


def test_memory_model_flag(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = memory_server_handler("hi")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "-m", "big", "--memory-model", "small", "hi", env=env)
    assert result.exit_code == 0, result.output

    def is_memory(r: FakeRequest) -> bool:
        return r.wants_json() or "write_file" in r.tool_names()

    assert {r.model for r in fake_openai.requests if not is_memory(r)} == {"big"}
    assert {r.model for r in fake_openai.requests if is_memory(r)} == {"small"}
    assert "agent: big (--model); memory: small (--memory-model)" in result.stderr


def test_startup_line_names_the_engine(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = memory_server_handler("hi")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "--engine", "extractive", "hi", env=env)
    assert result.exit_code == 0, result.output
    assert "memory: the extractive engine (no model)" in result.stderr.splitlines()[0]
    quiet = invoke("run", "-w", tmp_path, "-q", "--engine", "extractive", "hi", env=env)
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == "hi\n"
