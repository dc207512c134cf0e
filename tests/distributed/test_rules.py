"""The pure rules of scale-out: which errors are retried, what a job message is, and what a
broker URL looks like in banners, logs and ``repr``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sandmem.distributed import MemoryStoreConflict, MemoryStoreError, RedisScheduler
from sandmem.distributed._botocore import is_retryable as s3_retryable
from sandmem.distributed._jobs import PoisonMessage, parse_job
from sandmem.distributed._queue import redact_url
from sandmem.distributed._worker import is_retryable


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        ("SlowDown", "503", True),
        ("InternalError", "500", True),
        ("ServiceUnavailable", "503", True),
        ("Throttling", "400", True),
        ("RequestTimeout", "400", True),
        ("TooManyRequests", "429", True),
        ("", "502", True),
        ("", "", True),
        ("InvalidRequest", "400", False),
        ("KeyTooLongError", "400", False),
        ("AccessDenied", "403", False),
        ("InvalidArgument", "400", False),
        ("NoSuchBucket", "404", False),
    ],
)
def test_s3_errors_are_retried_only_when_later_may_work(
    code: str, status: str, retryable: bool
) -> None:
    assert s3_retryable(code, status) is retryable


def test_job_errors_are_classified() -> None:
    assert is_retryable(MemoryStoreError("5xx")) is True
    assert is_retryable(MemoryStoreError("4xx", retryable=False)) is False
    assert is_retryable(ConnectionError("refused")) is True
    assert is_retryable(TimeoutError()) is True
    assert is_retryable(ValueError("bad")) is False
    assert issubclass(MemoryStoreConflict, Exception)


@pytest.mark.parametrize(
    "raw",
    [None, b"", b"garbage", b"[1, 2]", b'"text"', b'{"store": {"bucket": 1}}', b'{"store": {}}'],
)
def test_anything_but_a_job_is_a_poison_message(raw: bytes | None) -> None:
    with pytest.raises(PoisonMessage, match=r"not a memory job|no body"):
        parse_job(raw)


def test_a_job_round_trips_and_names_its_layout() -> None:
    raw = b'{"store": {"bucket": "b", "prefix": "p/q"}, "memories_dir": "m", "sessions_dir": "s"}'
    job = parse_job(raw)
    assert job.layout == "b/p/q/m" and len(job.layout_id) == 16
    assert parse_job(job.encode()) == job


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:s3cret@host:6380/1", "rediss://user:***@host:6380/1"),
        ("redis://tokens3cret@host/0", "redis://***@host/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
    ],
)
def test_broker_urls_are_shown_without_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in repr(RedisScheduler(url))


def test_the_worker_banner_and_errors_never_show_the_broker_password() -> None:
    from sandmem.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "worker",
            "--broker",
            "redis://:s3cret@127.0.0.1:1/0",
            "--store",
            "s3://bucket/prefix",
            "--endpoint-url",
            "http://127.0.0.1:1",
            "--engine",
            "extractive",
        ],
    )
    assert result.exit_code != 0  # nothing listens on port 1
    assert "redis://:***@127.0.0.1:1/0" in result.output
    assert "s3cret" not in result.output + repr(result.exception)


async def test_a_rediss_url_connects_over_tls_with_its_password_and_bounds() -> None:
    from sandmem.distributed import RedisQueue

    queue = RedisQueue("rediss://:pw@redis.example:6380/2?ssl_ca_certs=/etc/ssl/ca.pem")
    pool = queue.client().connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"
    kwargs = pool.connection_kwargs
    assert kwargs["password"] == "pw" and kwargs["ssl_ca_certs"] == "/etc/ssl/ca.pem"
    assert kwargs["db"] == 2
    assert kwargs["socket_timeout"] == 5.0 and kwargs["socket_connect_timeout"] == 3.0
    await queue.aclose()
