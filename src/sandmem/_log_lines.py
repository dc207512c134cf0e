"""Plain text for people: sizes, one-line text, and sandmem's warnings as one line each.

Shared by the CLI and the demo (the demo runs inside and outside the ``sandmem`` command).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import click


def human_size(size: int | None) -> str:
    if size is None:
        return "missing"
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def one_line(text: str) -> str:
    """``text`` on one line, without control characters or escape sequences."""
    from sandmem._terminal import printable

    return " ".join(printable(text, one_line=True).split())


def redact(text: str) -> str:
    """``redaction.redact``, imported when a line is shown (its patterns compile on import:
    a command that logs nothing does not pay for them)."""
    from sandmem.redaction import redact as redact_text

    return redact_text(text)


class RedactLogRecords(logging.Filter):
    """A handler filter that redacts what a record shows (its message and its exception's
    text): a log line may carry a model server's error text, which can echo a key."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


class OneLineWarnings(logging.Handler):
    """Renders sandmem's log records of level WARNING and above as one readable line on the
    current stderr (``warning: ...``), the exception (if any) folded into the same line."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(record.getMessage())
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text += f": {type(exc).__name__}: {one_line(str(exc))}"
            level = "warning" if record.levelno < logging.ERROR else "error"
            click.echo(f"sandmem {level}: {redact(text)}", err=True)
        except Exception:  # pragma: no cover - logging must never break the command
            self.handleError(record)


@contextlib.contextmanager
def readable_warnings() -> Iterator[None]:
    """While a command runs, sandmem's warnings are one readable line each (no raw log lines,
    no tracebacks); the logger is restored afterwards."""
    logger = logging.getLogger("sandmem")
    if any(isinstance(h, OneLineWarnings) for h in logger.handlers):
        yield  # already on (``sandmem demo`` inside the ``sandmem`` group)
        return
    handler = OneLineWarnings()
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


def command_name() -> str:
    """How a hint should spell the ``sandmem`` command so that it runs as printed: ``sandmem``
    when the running script is the ``sandmem`` that ``PATH`` finds (or sandmem runs inside
    another program), else the path it was started by (``.venv/bin/sandmem`` after
    ``make demo``, whose venv is not activated)."""
    import os
    import shutil
    import sys

    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) != "sandmem" or not os.path.exists(script):
        return "sandmem"
    found = shutil.which("sandmem")
    if found and os.path.samefile(found, script):
        return "sandmem"
    path = os.path.abspath(script)
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") and os.sep in relative else path
