"""Which model each part of a command uses, and a quick check that the model server answers.

One setting drives everything: ``--model`` / ``SANDMEM_MODEL`` is the agent's model; the memory
phases use ``--memory-model`` / ``SANDMEM_MEMORY_MODEL`` when given, else the agent's model
whenever the user chose it (flag or environment) or ``OPENAI_BASE_URL`` names a server that is
not OpenAI's (where the OpenAI default names would not exist), else the documented defaults of
``MemoryGenerateConfig``.

A server that is not OpenAI's has no ``gpt-5.4-mini``: when no model is named anywhere, the
server is asked (``GET /models``) and its model is used when it lists exactly one; otherwise
the command stops with one line naming ``--model`` / ``SANDMEM_MODEL``
(``server_model``).

``client_options`` adds ``--timeout``, ``--max-retries`` and ``-v/--debug`` to every command
that calls a model; they configure the process's default provider.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from sandmem._errors import ModelRequestError, UserError
from sandmem.cli._settings_file import workspace_memory_model
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.models._provider import (
    DEFAULT_MODEL,
    OpenAIProvider,
    default_provider,
    model_from_env,
)
from sandmem.redaction import redact

F = TypeVar("F", bound=Callable[..., Any])
#: the offline agent of ``run`` / ``chat`` (``--model scripted``): no server, extractive memory
SCRIPTED = "scripted"

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

    def memory_config(self) -> MemoryGenerateConfig:
        return MemoryGenerateConfig.for_model(self.memory)

    def memory_text(self) -> str:
        if self.memory is None:
            one, two = _DEFAULTS.phase_one_model, _DEFAULTS.phase_two_model
            return f"{one} (phase one) and {two} (phase two), the defaults"
        if self.memory == EXTRACTIVE:
            return "the extractive engine (no model)"
        return f"{self.memory} ({self.memory_source})"

    def describe(self, *, memory: bool = True) -> str:
        """The start-up line: which model each part uses, and which server (none for the
        offline scripted agent, which contacts none)."""
        if self.agent == SCRIPTED:
            return (
                "agent: scripted (--model scripted: an offline deterministic agent, no model, "
                "no server); it reads memory, and its runs are not recorded"
            )
        api = OpenAIProvider().api
        text = f"agent: {self.agent} ({self.agent_source})"
        if memory:
            text += f"; memory: {self.memory_text()}"
        return f"{text}; {api} API at {server_url()}"


def named_memory_model(
    flag: str | None, flag_name: str, workspace: Path | None
) -> tuple[str, str] | None:
    """The memory model someone named, and where (the source ``ModelChoice`` shows): the flag
    (called ``flag_name``), else ``SANDMEM_MEMORY_MODEL``, else the workspace's
    ``sandmem.toml`` (``[memory] model``); ``None`` when none names one. The one reader of
    ``SANDMEM_MEMORY_MODEL``."""
    if flag:
        return flag, flag_name
    memory_env = _env("SANDMEM_MEMORY_MODEL")
    if memory_env:
        return memory_env, "SANDMEM_MEMORY_MODEL"
    memory_file = workspace_memory_model(workspace)
    if memory_file:
        return memory_file, "sandmem.toml"
    return None


def choose_models(
    agent_flag: str | None, memory_flag: str | None, engine: str, workspace: Path | None = None
) -> ModelChoice:
    """Apply the rule of the module docstring. ``engine == "extractive"`` wins for memory;
    ``--model scripted`` is the offline agent with the extractive engine. The workspace's
    ``sandmem.toml`` (``[memory] model``) comes after ``SANDMEM_MEMORY_MODEL``."""
    if agent_flag == SCRIPTED:
        if memory_flag and memory_flag != EXTRACTIVE:
            raise click.UsageError("--model scripted generates memory offline: drop --memory-model")
        return ModelChoice(SCRIPTED, "--model", EXTRACTIVE, "--model scripted")
    if agent_flag:
        agent, agent_source = agent_flag, "--model"
    elif model_from_env():
        agent, agent_source = str(model_from_env()), "SANDMEM_MODEL"
    else:
        agent, agent_source = DEFAULT_MODEL, "default"
    if engine == EXTRACTIVE:
        if memory_flag and memory_flag != EXTRACTIVE:
            raise click.UsageError("use either --engine extractive or --memory-model, not both")
        return ModelChoice(agent, agent_source, EXTRACTIVE, "--engine extractive")
    named = named_memory_model(memory_flag, "--memory-model", workspace)
    if named is not None:
        return ModelChoice(agent, agent_source, named[0], named[1])
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


#: the hint of ``run`` and ``chat`` when no model server is configured
OFFLINE_AGENT_HINT = "; or try it offline with --model scripted (a deterministic agent, no model)"


def check_server(
    timeout_s: float = CONNECT_TIMEOUT_S, hint: str = "", unreachable_hint: str = ""
) -> None:
    """Raise ``ModelRequestError`` at once when nothing answers at the model server's address
    (a TCP connect with a short timeout; skipped behind an HTTP proxy, which the client uses;
    ``unreachable_hint`` ends its message), ``UserError`` when no server is configured (with
    ``hint``) or ``OPENAI_BASE_URL`` is not a URL."""
    require_model_server(hint)
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
        f"cannot reach the model server at {url} ({problem}); start it, or {where}"
        + unreachable_hint,
        retryable=True,
    )


def _listed_models(url: str, timeout_s: float) -> list[str]:
    """The model ids ``GET {url}/models`` lists (raises ``OSError`` / ``ValueError``)."""
    request = urllib.request.Request(url.rstrip("/") + "/models")
    key = _env("OPENAI_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        data = json.loads(reply.read(1 << 20))
    return sorted(
        {str(m["id"]) for m in data.get("data", []) if isinstance(m, dict) and m.get("id")}
    )


def server_model(choice: ModelChoice, timeout_s: float = CONNECT_TIMEOUT_S) -> ModelChoice:
    """``choice`` with a model the server really has, when no model was named and the server
    is not OpenAI's: the one model ``GET /models`` lists; ``UserError`` (one line naming
    ``--model`` / ``SANDMEM_MODEL``) when it lists none or several, or cannot say."""
    url = server_url()
    if choice.agent_source != "default" or is_openai_server(url):
        return choice
    try:
        models = _listed_models(url, timeout_s)
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        reason = str(exc)
        if isinstance(exc, urllib.error.HTTPError):
            reason = f"HTTP {exc.code}"
            exc.close()  # it holds the connection
        raise UserError(
            f"no model named, and the server at {url} did not list its models ({reason}): "
            "pass --model M or set SANDMEM_MODEL (and SANDMEM_MEMORY_MODEL for memory)"
        ) from None
    if len(models) != 1:
        shown = ", ".join(models[:8]) + (", ..." if len(models) > 8 else "")
        found = f"serves {len(models)} models ({shown})" if models else "lists no model"
        raise UserError(
            f"no model named, and the server at {url} {found}: pass --model M or set "
            "SANDMEM_MODEL (and SANDMEM_MEMORY_MODEL for memory)"
        )
    source = f"the only model at {url}"
    memory = choice.memory
    memory_source = choice.memory_source
    if memory not in (EXTRACTIVE,) and choice.memory_source.startswith("the agent's model"):
        memory, memory_source = models[0], "the agent's model"
    return replace(
        choice, agent=models[0], agent_source=source, memory=memory, memory_source=memory_source
    )


def memory_model_for_server(named: str | None) -> str | None:
    """The memory model of ``memory generate`` / ``forget``: the one named
    (``named_memory_model``), else ``SANDMEM_MODEL``, else (a server that is not OpenAI's)
    the one model it lists; ``None``: the ``MemoryGenerateConfig`` defaults."""
    named = named or model_from_env()
    if named or is_openai_server(server_url()):
        return named
    choice = ModelChoice(DEFAULT_MODEL, "default", DEFAULT_MODEL, "the agent's model")
    return server_model(choice).agent


# ---------------------------------------------------------------- client options


def _set_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
    default_provider().timeout = value


def _set_retries(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    default_provider().max_retries = value


class _DebugLines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"sandmem debug: {redact(record.getMessage())}", err=True)


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value:
        return
    logger = logging.getLogger("sandmem.http")
    handler = _DebugLines()
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(saved)

    ctx.call_on_close(restore)


def client_options(fn: F) -> F:
    """``--timeout S`` (``SANDMEM_TIMEOUT``), ``--max-retries N`` (``SANDMEM_MAX_RETRIES``) and
    ``-v`` / ``--debug`` (``SANDMEM_DEBUG``: one line per HTTP request on stderr: method, URL,
    status, time; never the key) for a command that calls a model."""
    fn = click.option(
        "--debug",
        "-v",
        is_flag=True,
        envvar="SANDMEM_DEBUG",
        expose_value=False,
        callback=_set_debug,
        help="Print each model request (method, URL, status, time; never the key) on stderr.",
    )(fn)
    fn = click.option(
        "--max-retries",
        type=click.IntRange(min=0),
        metavar="N",
        expose_value=False,
        callback=_set_retries,
        help="Retries of a failed model request (408/409/429/5xx, connection errors) "
        "[env SANDMEM_MAX_RETRIES; default 3].",
    )(fn)
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        expose_value=False,
        callback=_set_timeout,
        help="Seconds each model request may take [env SANDMEM_TIMEOUT; default 60].",
    )(fn)
