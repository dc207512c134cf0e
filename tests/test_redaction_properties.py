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


# The gates (``redaction._GATES``) let a rule that starts with a character class or a
# case-blind word skip a text its gate is not found in. A gate must be implied by every match
# of its rule: redaction with the gates is the same as without them, whatever the case, the
# separators, the quoting and the characters around the key (non-ASCII ones included, which
# lower-case to ASCII letters or expand).
GATED_KEYS = (
    "password", "PASSWD", "Passphrase", "db_pass", "DB.PASS", "x-pwd", "_PWD", "pass",
    "secret", "Client_Secret", "SECRET_ACCESS_KEY", "secretaccesskey", "aws-secret-key",
    "private_key", "MasterKey", "key", "token", "Access-Token", "TOKEN", "api_key", "ApiKey",
    "API-KEY", "apikey", "Bearer", "bearer", "AUTHORIZATION", "Authorization", "sk_live_",
    "rk_test_", "sk_test_", "MTk4NjIyNDgzNDcxOTI1MjQ4", "/p", "\\s", "",
)  # fmt: skip
GATED_GLUE = (
    ":", "=", ": ", " = ", ":=", '"', "'", '\\"', "]", "\t", "\n", " ", ".", "-", "_",
    "\u212a", "\u017f", "\u0130", "\u0131", "é", "…",
)  # fmt: skip
GATED_VALUES = (
    "hunter2", "Zx9vQ2mL8pR4tY7w", "s3cr3t-Value_42", "abcdefghijklmnopqrstuvwx",
    "AKIAZQ3DRTL5PX7NVY2B", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq2Jd8Ab3X", "${TOKEN}", "xxxxxxxx",
    "GhJkLmNoPqRsTuVwXyZaBcDe.Gh4Jk2.AbCdEfGhIjKlMnOpQrStUvWxYz0123",
)  # fmt: skip


_gated_part = st.tuples(
    st.sampled_from(GATED_KEYS),
    st.lists(st.sampled_from(GATED_GLUE), max_size=3).map("".join),
    st.sampled_from(GATED_VALUES),
).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        _gated_part
        | st.sampled_from(GATED_KEYS)
        | st.sampled_from(GATED_GLUE)
        | st.sampled_from(GATED_VALUES),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
def test_the_gates_change_no_redaction(parts: list[str], upper: bool) -> None:
    from unittest import mock

    from sandmem import redaction

    text = "".join(parts)
    text = text.upper() if upper else text
    gated = redaction.Redactor()
    found, redacted = gated._spans(text), gated.redact(text)
    with mock.patch.dict(redaction._GATES, clear=True):
        ungated = redaction.Redactor()
        assert ungated._spans(text) == found
        assert ungated.redact(text) == redacted


def test_the_gates_change_no_redaction_of_any_key_separator_and_value() -> None:
    """Every gated key, as written and upper-cased, before every way an assignment may join
    it to its value (quote, bracket, spaces, separator), before a value of each shape."""
    import itertools
    from unittest import mock

    from sandmem import redaction

    glues = [
        "".join(p)
        for p in itertools.product(
            ("", '"', "'", '\\"'),
            ("", "]"),
            ("", " ", "\t"),
            (":", "=", ":=", ": ", "= ", " ", "\t", "", "."),
        )
    ]
    values = ("Zx9vQ2mL8pR4tY7w", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq2Jd8Ab3X")
    keys = sorted({k for key in GATED_KEYS for k in (key, key.upper())})
    texts = [k + g + v for k, g, v in itertools.product(keys, glues, values)]
    gated = redaction.Redactor()
    found = [gated.redact(t) for t in texts]
    assert sum(f != t for f, t in zip(found, texts, strict=True)) > len(texts) // 10
    with mock.patch.dict(redaction._GATES, clear=True):
        ungated = redaction.Redactor()
        assert [ungated.redact(t) for t in texts] == found


def test_every_gated_rule_still_finds_its_secret() -> None:
    """One secret per gated rule, written the way its gate must still see it."""
    from sandmem import redaction

    cases = {
        "password": 'DB_PASSWORD="Zx9vQ2mL8pR4tY7w"',
        "secret": "Client_Secret: Zx9vQ2mL8pR4tY7w",
        "token": "ACCESS_TOKEN=Zx9vQ2mL8pR4tY7w",
        "api-key": "X-Api-Key: Zx9vQ2mL8pR4tY7w",
        "bearer-token": "curl -H 'BEARER Zx9vQ2mL8pR4tY7w'",
        "auth-header": "Authorization: Basic Zx9vQ2mL8pR4tY7w",
        "aws-secret-key": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq2Jd8Ab3X",
        "stripe-key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "discord-token": "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
    }
    rules = {pattern: kind for kind, pattern in redaction.DEFAULT_PATTERNS}
    assert {rules[pattern] for pattern in redaction._GATES} == set(cases)
    for kind, text in cases.items():
        assert f"[REDACTED:{kind}]" in redaction.redact(text), text


def test_the_escape_scan_finds_what_a_per_position_scan_finds() -> None:
    """``_ESCAPE`` has every branch start with a literal (so ``re`` scans for it): its
    matches are those of trying the same branches at every position."""
    import re

    from sandmem import redaction

    branches = redaction._ESCAPE.pattern.split("|")
    texts = [
        "plain text with 100% and a \\\\ path and \\n",
        'colour \x1b[31mred\x1b[0m, \\x41, \\u0041, %41, \\033[1m, \\33x, \\0339 "\\"',
        "\x1b[ no final byte, \x1b[?25h, % 4, %zz, \\u12, \\x1",
    ]
    for text in texts:
        found = [(m.start(), m.end()) for m in redaction._ESCAPE.finditer(text)]
        expected, pos = [], 0
        while pos < len(text):
            ends = [m.end() for b in branches if (m := re.compile(b).match(text, pos))]
            if ends:
                expected.append((pos, ends[0]))
                pos = ends[0]
            else:
                pos += 1
        assert found == expected, text
        assert found
