"""Property-based tests of redaction (issue 25): random secrets of every format-recognised
kind, in random surrounding text, behind random separators, in every encoding a secret reaches
disk or a span in, are never left readable; random look-alikes in the same settings are never
touched."""

from __future__ import annotations

import json
import random
import urllib.parse
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandmem.redaction import redact
from tests.test_redaction import PLAIN_GENERATORS, SECRET_GENERATORS, _core

#: secrets recognised by their own shape (context-free): they must go wherever they stand
FORMAT_KINDS = (
    "openai_legacy", "openai_proj", "anthropic", "aws_akia", "aws_asia", "ghp", "gho",
    "github_pat", "glpat", "slack_bot", "stripe_live", "whsec", "google", "gocspx", "ya29",
    "jwt", "hf", "npm", "pypi", "sendgrid", "pem_rsa", "pem_openssh",
)  # fmt: skip
WORDS = ("the", "build", "ok", "run", "tests", "passed", "in", "src/app.py", "42", "done", "-v")
SEPARATORS = (" ", "\n", "\t", "\r\n", '"', "'", "(", "[", "{", "=", ": ", ",", "`", "<", ">")


def _encode(kind: str, text: str) -> str:
    encoders: dict[str, Callable[[str], str]] = {
        "plain": lambda t: t,
        "json": json.dumps,
        "json2": lambda t: json.dumps(json.dumps({"cmd": t})),
        "url": lambda t: urllib.parse.quote(t, safe=""),
        "url-in-json": lambda t: json.dumps({"u": urllib.parse.quote(t, safe="/:")}),
    }
    return encoders[kind](text)


ENCODINGS = ("plain", "json", "json2", "url", "url-in-json")
prose = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(FORMAT_KINDS),
    seed=st.integers(0, 2**32),
    before=prose,
    after=prose,
    left=st.sampled_from(SEPARATORS),
    right=st.sampled_from(SEPARATORS),
    encoding=st.sampled_from(ENCODINGS),
)
def test_a_secret_never_survives(
    kind: str, seed: int, before: str, after: str, left: str, right: str, encoding: str
) -> None:
    secret = SECRET_GENERATORS[kind](random.Random(seed))
    text = _encode(encoding, before + left + secret + right + after)
    out = redact(text)
    core = _core(secret)
    for form in (core, json.dumps(core)[1:-1], urllib.parse.quote(core, safe="")):
        assert form not in out
    assert redact(out) == out


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(PLAIN_GENERATORS)),
    seed=st.integers(0, 2**32),
    before=prose,
    after=prose,
    left=st.sampled_from(SEPARATORS),
    right=st.sampled_from(SEPARATORS),
    encoding=st.sampled_from(ENCODINGS),
)
def test_a_look_alike_is_never_touched(
    kind: str, seed: int, before: str, after: str, left: str, right: str, encoding: str
) -> None:
    value = PLAIN_GENERATORS[kind](random.Random(seed))
    text = _encode(encoding, before + left + value + right + after)
    assert redact(text) == text
