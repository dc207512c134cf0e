"""Real services for the distributed tests (``tests/services.py``): a Redis server and a
SeaweedFS S3 server for the whole test session, stopped at its end. A missing binary skips the
tests locally and fails them in CI (``CI`` set), where ``.ci/run`` installs them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from services import RedisServer, S3Server, ServiceError, start_redis, start_s3

__all__ = ["RedisServer", "S3Server"]


def _unavailable(exc: ServiceError) -> None:
    if os.environ.get("CI"):
        pytest.fail(str(exc))
    pytest.skip(str(exc))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        server = start_redis(tmp_path_factory.mktemp("redis"))
    except ServiceError as exc:
        _unavailable(exc)
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    if not os.environ.get("CI"):
        pytest.importorskip("boto3")
    try:
        server = start_s3(tmp_path_factory.mktemp("weed"))
    except ServiceError as exc:
        _unavailable(exc)
        raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
