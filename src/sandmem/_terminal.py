"""Text that is safe to show on a terminal: the one sanitiser for data the CLI prints.

Data a command prints (client names, tasks of ingested transcripts, file names, memory
files, a model's answer) can hold control characters and escape sequences. Printed raw, they
act on the terminal: an OSC 52 sequence writes the clipboard, ``\\r`` or a cursor move
overwrites a line already shown (a forged version line), a bidirectional override shows text
in another order than it reads. ``printable`` removes them:

- whole escape sequences (CSI, OSC, DCS, SOS, PM, APC, the two-character ones), 7-bit and
  8-bit (C1) forms, so no parameter text is left behind;
- every other control character but the newline and the tab (``one_line``: those become a
  space too), and the line and paragraph separators;
- the bidirectional overrides, embeddings and isolates.

``TerminalSafe`` wraps a text stream so that every write goes through ``printable``; the
``sandmem`` command wraps stdout and stderr with it for the whole command
(``safe_streams``), so every print of every command is covered. What the CLI draws on
purpose (rich's progress bar, the live view's spinner) writes to ``raw(stream)``.
``json_text`` escapes what JSON leaves raw (C1 controls, bidi controls, separators) so JSON
output stays valid and inert.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

#: escape sequences, whole: CSI, OSC / DCS / SOS / PM / APC (up to their terminator or the
#: end of the text), any other ESC + intermediates + final; and their 8-bit C1 forms
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])(?:[^\x07\x1b\x9c\n]*)(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
#: bidirectional controls: LRE RLE PDF LRO RLO, LRI RLI FSI PDI, LRM RLM ALM
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029" + _BIDI + "]",
)
_CONTROL_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029" + _BIDI + "]")
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029" + _BIDI + "]")


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` without escape sequences, control characters (newlines and tabs kept unless
    ``one_line``: then each is a space) or bidirectional controls."""
    if text.isprintable():
        return text  # the common case costs one scan
    text = _SEQUENCE.sub("", text)
    if one_line:
        return _CONTROL_ONE_LINE.sub(
            lambda m: " " if m.group() in "\n\t\r\u2028\u2029" else "", text
        )
    return _CONTROL.sub("", text)


def json_text(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with the characters it leaves raw
    that act on a terminal written as ``\\uXXXX`` escapes: still the same JSON value."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class TerminalSafe:
    """A text stream whose writes go through ``printable``; everything else (``isatty``,
    ``fileno``, ``encoding``, ``buffer`` for bytes) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def raw(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def raw(stream: Any) -> Any:
    """The stream under a ``TerminalSafe`` (for what the CLI draws on purpose)."""
    return stream.raw if isinstance(stream, TerminalSafe) else stream


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """While a command runs, ``sys.stdout`` and ``sys.stderr`` print only printable text."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, TerminalSafe):
        sys.stdout = TerminalSafe(sys.stdout)
    if not isinstance(sys.stderr, TerminalSafe):
        sys.stderr = TerminalSafe(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
