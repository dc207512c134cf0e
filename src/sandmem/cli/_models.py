"""Which model each part of a command uses, and a quick check that the model server answers.

One setting drives everything: ``--model`` / ``SANDMEM_MODEL`` is the agent's model; the memory
phases use ``--memory-model`` / ``SANDMEM_MEMORY_MODEL`` when given, else the agent's model
whenever the user chose it (flag or environment) or ``OPENAI_BASE_URL`` names a server that is
not OpenAI's (where the OpenAI default names would not exist), else the documented defaults of
``MemoryGenerateConfig``.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

import click

from sandmem._errors import ModelRequestError, UserError
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.models._provider import DEFAULT_MODEL, OpenAIProvider

OPENAI_URL = "https://api.openai.com/v1"
#: how long the start-up check waits for the server to accept a connection
CONNECT_TIMEOUT_S = 3.0
_DEFAULTS = MemoryGenerateConfig()


def _env(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


def server_url() -> str:
    return _env("OPENAI_BASE_URL") or OPENAI_URL


def is_openai_server(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "openai.com" or host.endswith(".openai.com")


@dataclass(frozen=True)
class ModelChoice:
    """The agent's model and the memory phases' model, each with where it came from.

    ``memory`` is one model name for both phases, ``"extractive"``, or ``None`` for the
    ``MemoryGenerateConfig`` defaults."""

    agent: str
    agent_source: str
    memory: str | None
    memory_source: str

    def generate_config(self) -> MemoryGenerateConfig:
        if self.memory is None:
            return MemoryGenerateConfig()
        if self.memory == EXTRACTIVE:
            return MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
        # the server's own defaults: a name the user picked may or may not be a reasoning model
        return MemoryGenerateConfig(
            phase_one_model=self.memory,
            phase_two_model=self.memory,
            phase_one_model_settings=None,
            phase_two_model_settings=None,
        )

    def memory_text(self) -> str:
        if self.memory is None:
            one, two = _DEFAULTS.phase_one_model, _DEFAULTS.phase_two_model
            return f"{one} (phase one) and {two} (phase two), the defaults"
        if self.memory == EXTRACTIVE:
            return "the extractive engine (no model)"
        return f"{self.memory} ({self.memory_source})"

    def describe(self, *, memory: bool = True) -> str:
        """The start-up line: which model each part uses, and which server."""
        api = OpenAIProvider().api
        text = f"agent: {self.agent} ({self.agent_source})"
        if memory:
            text += f"; memory: {self.memory_text()}"
        return f"{text}; {api} API at {server_url()}"


def choose_models(agent_flag: str | None, memory_flag: str | None, engine: str) -> ModelChoice:
    """Apply the rule of the module docstring. ``engine == "extractive"`` wins for memory."""
    if agent_flag:
        agent, agent_source = agent_flag, "--model"
    elif _env("SANDMEM_MODEL"):
        agent, agent_source = str(_env("SANDMEM_MODEL")), "SANDMEM_MODEL"
    else:
        agent, agent_source = DEFAULT_MODEL, "default"
    if engine == EXTRACTIVE:
        if memory_flag:
            raise click.UsageError("use either --engine extractive or --memory-model, not both")
        return ModelChoice(agent, agent_source, EXTRACTIVE, "--engine extractive")
    if memory_flag:
        return ModelChoice(agent, agent_source, memory_flag, "--memory-model")
    memory_env = _env("SANDMEM_MEMORY_MODEL")
    if memory_env:
        return ModelChoice(agent, agent_source, memory_env, "SANDMEM_MEMORY_MODEL")
    if agent_source != "default":
        return ModelChoice(agent, agent_source, agent, f"the agent's model, from {agent_source}")
    if not is_openai_server(server_url()):
        return ModelChoice(agent, agent_source, agent, "the agent's model: not an OpenAI server")
    return ModelChoice(agent, agent_source, None, "default")


def require_model_server(hint: str = "") -> None:
    """Fail early (before any work) when no OpenAI-compatible server is configured."""
    if _env("OPENAI_API_KEY") or _env("OPENAI_BASE_URL"):
        return
    raise UserError(
        "no model server configured: set OPENAI_API_KEY (for api.openai.com) or "
        "OPENAI_BASE_URL (for an OpenAI-compatible server such as Ollama or vLLM)" + hint
    )


def _uses_proxy(scheme: str, host: str) -> bool:
    return scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(host)


def check_server(timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ``ModelRequestError`` at once when nothing answers at the model server's address
    (a TCP connect with a short timeout; skipped behind an HTTP proxy, which the client uses),
    ``UserError`` when no server is configured or ``OPENAI_BASE_URL`` is not a URL."""
    require_model_server()
    url = server_url()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(
            f"OPENAI_BASE_URL must be an http(s) URL such as http://localhost:11434/v1, got {url!r}"
        )
    host = parts.hostname
    if _uses_proxy(parts.scheme, host):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ValueError:
        raise UserError(f"OPENAI_BASE_URL has an invalid port: {url!r}") from None
    except socket.gaierror:
        problem = f"unknown host {host!r}"
    except TimeoutError:
        problem = f"no answer within {timeout_s:g} s"
    except OSError as exc:
        problem = (exc.strerror or str(exc)).lower()
    else:
        return
    where = (
        "set OPENAI_BASE_URL to a server that runs"
        if _env("OPENAI_BASE_URL")
        else ("check your network, or set OPENAI_BASE_URL to a local server")
    )
    raise ModelRequestError(
        f"cannot reach the model server at {url} ({problem}); start it, or {where}",
        retryable=True,
    )
