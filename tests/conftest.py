"""Suite-wide guards and fixtures.

- No test reaches a host other than this machine: socket connections to non-loopback addresses
  fail, and the test fails even if the code under test swallowed the error (the ``openai``
  client turns it into a retried connection error).
- No test sees a real OpenAI key or a user's model configuration from the environment.
- No test reads or writes the user's sandmem data (personal memory, ``config.toml``):
  ``SANDMEM_HOME`` is a fresh temporary directory for each test.
- Search ranks with BM25 (``SANDMEM_SEARCH=bm25``) even where the ``semantic`` extra is
  installed: a test of hybrid search asks for it (``_vectors.use_embedder`` or the variable).
- ``fake_openai``: a started ``FakeOpenAIServer`` (see ``tests/fake_openai.py``).
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer  # tests/ is on sys.path (pytest rootdir conftest)
from python_forks import PythonForks

_MODEL_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "SANDMEM_OPENAI_API",
    "SANDMEM_MODEL",
    "SANDMEM_TIMEOUT",
    "SANDMEM_MAX_TOKENS",
    "SANDMEM_TEXT_TOOL_CALLS",
)


class NetworkAccessBlocked(OSError):
    """A test tried to connect to a host other than this machine."""


def _is_local_host(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    host = host.strip("[]").split("%", 1)[0]  # IPv6 brackets and zone ids
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _is_local_address(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path (or abstract name)
        return True
    if isinstance(address, tuple) and address:
        return _is_local_host(address[0])
    return False


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test on any socket connection to a non-loopback host."""
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create_connection = socket.create_connection

    def check(address: Any) -> None:
        if not _is_local_address(address):
            attempts.append(repr(address))
            raise NetworkAccessBlocked(f"tests may not reach {address!r}: only loopback is allowed")

    def connect(self: socket.socket, address: Any) -> None:
        if self.family != getattr(socket, "AF_UNIX", None):
            check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family != getattr(socket, "AF_UNIX", None):
            check(address)
        return real_connect_ex(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        check(address)
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    yield attempts
    if attempts:
        pytest.fail(f"test tried to reach non-loopback hosts: {', '.join(attempts)}")


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never use a real key or the developer's model configuration."""
    for name in _MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDMEM_SEARCH", "bm25")


@pytest.fixture(autouse=True)
def _no_user_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Personal memory and the scope settings of a test live in a temporary directory."""
    monkeypatch.setenv("SANDMEM_HOME", str(tmp_path_factory.mktemp("sandmem-home")))


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started fake OpenAI server with the echo handler; re-script it with
    ``fake_openai.handler = ...`` and ``fake_openai.inject(...)``."""
    server = FakeOpenAIServer()
    with server:
        yield server
    if server.handler_errors:
        pytest.fail("the fake OpenAI handler raised:\n" + "\n".join(server.handler_errors))


#: what the fork server imports once (what doc blocks and examples import)
_FORK_PRELOAD = ("openai", "sandmem", "sandmem.memory", "sandmem.testing", "sandmem.cli")


@pytest.fixture(scope="session")
def python_forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonForks]:
    """Runs ``python -c CODE`` / ``python SCRIPT`` programs as forks of one process that has
    imported sandmem (see ``tests/python_forks.py``: for doc blocks and examples)."""
    forks = PythonForks(_FORK_PRELOAD, tmp_path_factory.mktemp("forks"))
    try:
        yield forks
    finally:
        forks.close()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(proc.stdout)


_otel_exporter: Any = None


@pytest.fixture
def otel_spans() -> Iterator[Any]:
    """An OpenTelemetry ``InMemorySpanExporter`` receiving every span of the test (the SDK's
    global tracer provider is set once per process; the exporter is cleared per test)."""
    global _otel_exporter
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if _otel_exporter is None:
        _otel_exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_otel_exporter))
        trace.set_tracer_provider(provider)
    _otel_exporter.clear()
    yield _otel_exporter
    _otel_exporter.clear()
