"""The botocore side of ``S3MemoryStore``: a lean client and the translation of its errors.

``translated`` is the one boundary where botocore's exceptions become the store's::

    MemoryStoreConflict      412 / 409: another writer made a version first
    FileNotFoundError        a missing key
    MemoryStoreError         retryable=True: network errors, timeouts, 5xx, throttling
                             retryable=False: every other 4xx (bad request, access denied, a
                             missing bucket): trying again cannot help
"""

from __future__ import annotations

from typing import Any

from sandmem._extras import require
from sandmem.memory._store_seam import (
    MAX_OBJECT_BYTES,
    MalformedStoreObject,
    MemoryStoreConflict,
    MemoryStoreError,
)

_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
#: 4xx codes that mean "later may work" (throttling, a request that timed out at the server)
_RETRYABLE_CODES = {
    "Throttling",
    "ThrottlingException",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "RequestLimitExceeded",
    "TooManyRequests",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "InternalError",
    "ServiceUnavailable",
}


def is_retryable(code: str, status: str) -> bool:
    """The retry rule for an S3 error response: throttling, server-side timeouts and 5xx may
    pass later; every other 4xx is permanent (conflicts and missing keys are told apart before
    this rule is asked)."""
    if code in _RETRYABLE_CODES or status in {"429", "408"}:
        return True
    if status.isdigit():
        return not 400 <= int(status) < 500
    return not code  # no status and no code: not an answer from the server


def translated(exc: Exception, where: str, key: str) -> Exception | None:
    """The store's exception for a botocore one raised by a request on ``key`` of ``where``
    (``None``: not botocore's; raise it as it is)."""
    botocore = require("botocore.exceptions")
    if isinstance(exc, botocore.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code in _CONFLICT_CODES or status in {"412", "409"}:
            return MemoryStoreConflict(f"{where}: {code}")
        if code == "NoSuchBucket":
            return MemoryStoreError(f"{where}: the bucket does not exist", retryable=False)
        if code in _MISSING_CODES or status == "404":
            return FileNotFoundError(key)
        return MemoryStoreError(f"{where}: {code or exc}", retryable=is_retryable(code, status))
    if isinstance(exc, botocore.BotoCoreError):
        return MemoryStoreError(f"{where} is unreachable: {exc}")
    return None


def read_object(fn: Any, **kwargs: Any) -> tuple[bytes, str]:
    """``get_object`` and its body, read in the calling (worker) thread: the bytes and the
    tag, or ``MalformedStoreObject`` (nothing read) for an object over ``MAX_OBJECT_BYTES``."""
    response = fn(**kwargs)
    key = kwargs.get("Key", "")
    size = response.get("ContentLength")
    if isinstance(size, int) and size > MAX_OBJECT_BYTES:
        response["Body"].close()
        raise MalformedStoreObject(f"{key} is {size} bytes; not read")
    body = response["Body"].read(MAX_OBJECT_BYTES + 1)
    if len(body) > MAX_OBJECT_BYTES:
        raise MalformedStoreObject(f"{key} is too large; not read")
    return body, str(response.get("ETag", ""))


def lean_client(**options: Any) -> Any:
    """A botocore S3 client without the work this store never needs, per request: timestamps
    are left as the server's strings (the store reads none), request and response checksums
    only where S3 requires them (TCP and TLS already protect the small bodies; many
    S3-compatible servers reject the newer checksum headers), and no ``Expect: 100-continue``
    wait before each upload (the bodies are small)."""
    session = require("botocore.session").get_session()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
    client_args = {
        k: options.pop(k)
        for k in ("endpoint_url", "region_name", "aws_access_key_id", "aws_secret_access_key")
        if k in options
    }
    config = require("botocore.config").Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        **options,
    )
    client = session.create_client("s3", config=config, **client_args)
    handlers = require("botocore.handlers")
    client.meta.events.unregister("before-call.s3", handlers.add_expect_header)
    return client
