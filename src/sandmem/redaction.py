"""Secret redaction for rollouts and memory files.

A :class:`Redactor` replaces credentials in text with a marker that names their kind, e.g.
``[REDACTED:aws-access-key]``. It is applied to every rollout segment before it is appended and
to every memory file before it is written, so a secret an agent saw never reaches disk.

Two families of rules, applied in this order (specific formats first, so their kind wins):

* **format rules** recognise a credential by its own shape: provider keys (``sk-proj-...``,
  ``AKIA...``, ``ghp_...``), JWTs, PEM private keys. The whole credential is replaced.
* **context rules** recognise a credential by what surrounds it: ``password=``, ``"token": ...``,
  ``--api-key ...``, ``Authorization: Bearer ...``, ``https://user:pw@host``. Only the value is
  replaced; the key, scheme and host stay readable. Values that are clearly not secrets (empty,
  placeholders like ``<your-key>``/``xxx``/``${VAR}``, ALL_CAPS env-var names, code such as
  ``os.environ[...]`` or ``getpass()``, type annotations such as ``password: str``) are kept.

A pattern may define a group named ``secret``: then only that group is replaced, otherwise the
whole match. Redaction is idempotent: redacting redacted text changes nothing. See
``docs/redaction.md`` for the rule set, the measured corpus results and the known limits.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any, Final, TypeVar, cast

from sandmem._errors import UserError

__all__ = ["DEFAULT_PATTERNS", "Redactor", "redact"]

_T = TypeVar("_T")

_MARKER: Final = "[REDACTED:"
_KIND_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

# ---------------------------------------------------------------------------------------------
# Building blocks of the context rules
# ---------------------------------------------------------------------------------------------

# One character of an unquoted value. A value ends at whitespace, a quote, a backslash (the
# start of an escape in JSON-encoded text) or an "&" that starts the next URL query parameter.
_VCHAR = r"""(?:[^\s'"`\\&]|&(?![\w.\[\]-]+=))"""
# Where an identifier-like unquoted value ends (used to test "the whole value is X").
_WEND = r"""(?=[\s'"`\\&,;()\[\]{}|]|\Z)"""
# Words that are never secrets on their own: literals, type names, the key names themselves.
_WORDS = (
    r"true|false|null|none|nil|undefined|yes|no|on|off|required|optional|redacted|hidden"
    r"|masked|empty|dummy|placeholder|str|bytes|string|int|number|bool|boolean|float|any"
    r"|object|secretstr|secretbytes|password|passwd|passphrase|pass|secret|token|api[_-]?key"
    r"|apikey"
)


def _placeholder(end: str, *, in_code: bool = True) -> str:
    """A regex for values that only look like secrets; ``end`` asserts the end of the value.
    ``in_code`` adds shapes that only make sense inside a line of code (``f(token=tok)``)."""
    shapes = (
        r"\$[{(]|\$[A-Za-z_]\w*" + end,  # ${VAR}  $(cat file)  $VAR
        r"[{<]|%[sd(]",  # {{ tpl }}  {name}  <your-key>  %(name)s  '%s:%s' % (user, pw)
        r"-{1,2}[A-Za-z][\w-]*" + end,  # the next CLI flag: --password --verbose
        r"(?i:(?:your|replace|change|insert)[-_ ]?(?:me\b|[a-z]))",  # your-api-key, changeme
        r"\[[\w :-]*\]" + end,  # [REDACTED:token]  [hidden]
        r"\S{1,2}" + end,  # too short to be a credential
        r":?(?:[A-Za-z0-9]{1,8}[-_]){0,2}[xX*.#_-]{3,}" + end,  # xxxx  ****  sk-...  ghp_xxxx
        r"#[0-9A-Fa-f]{3,8}" + end,  # a colour: Token: "#cccccc"
        r"[\w/+]*EXAMPLE(?:KEY)?" + end,  # AWS's documented example credentials
        r"[A-Z]+(?:_[A-Z0-9]+)+" + end,  # OPENAI_API_KEY: the name of an env var
        r"[A-Z]{1,15}" + end,  # TOKEN  REDACTED
        r"(?:[A-Z][a-z]+){2,}" + end,  # a type or class: client_secret: ClientSecret
        r"(?i:" + _WORDS + ")" + end,  # None  str  true  password=password
        r"[A-Za-z_]+(?:\.[A-Za-z_]\w*)+" + end,  # self.token  Name.Builtin  settings.SECRET
        r"[A-Za-z_][\w.]*[(\[]",  # getpass()  os.environ["X"]  config['password']  auth[2]
    )
    # an argument or operand in code: f(api_key=key, token=tok)  x=secret or default
    code = (r"[a-z_]+(?=[ \t]*[,)}\]]|[ \t]+(?:or|and|if|else)\b)",) if in_code else ()
    return "(?:" + "|".join(shapes + code) + ")"


_VALUE_END = r"(?(q)(?P=q)|" + _WEND + ")"


def _value(*, after_spaced_equals: str = "") -> str:
    """A value after ``key=``, ``key: `` or ``--key ``: quoted (spaces allowed, escapes honoured,
    closing quote on the same line) or unquoted. Placeholders are rejected, and so are shapes of
    code: a quoted value starting with a space or a comma, an unquoted one starting with "=",
    "(" or "[" (prompts, comparisons, expressions: ``"Password: " + x``, ``password == x``,
    ``user_pass = (user + ":" + pw)``). ``after_spaced_equals`` names a group that is set when
    the separator was a spaced `` = ``: then a bare word (``self._pwd = pwd``) is a variable;
    ``hunter2`` or ``s3cr3t!`` still count as values."""
    code_word = (
        "|(?(" + after_spaced_equals + ")[A-Za-z_]+" + _WEND + "|(?!))"
        if after_spaced_equals
        else ""
    )
    return (
        r"""(?P<q>\\?["'])?"""
        + "(?!"
        + _placeholder(_VALUE_END)
        + r"|(?(q)[\s,]|[=(\[])"
        + code_word
        + ")"
        + r"(?P<secret>(?(q)(?:(?!(?P=q))(?:[^\\\n]|\\[^nr]))+(?=(?P=q))|"
        + _VCHAR
        + "++))"
    )


def _lead(literal: str, not_after: str = r"[\w-]") -> str:
    """``literal`` not preceded by a ``not_after`` character. The check is a lookbehind placed
    *after* the literal so that the pattern starts with it: ``re`` then scans for the literal
    quickly instead of trying every position (about 40x faster on large text)."""
    return literal + "(?<!" + not_after + literal + ")"


def _ci(word: str) -> str:
    return "(?i:" + word + ")"


def _key_lookbehinds(*forms: str) -> str:
    """Lookbehinds that accept one of ``forms`` (fixed-width, case-insensitive) as the key."""
    return "(?:" + "|".join("(?<=" + _ci(form) + ")" for form in forms) + ")"


_SEP = r"[_.-]"
# Each anchor matches the *last word* of a key that holds a secret (``DB_PASSWORD``,
# ``client_secret``, ``x-api-key``, ``accessToken``), so ``token_count`` or ``password_field``
# never match. Every anchor starts with one letter class, which keeps the scan fast.
_ANCHORS: Final[tuple[tuple[str, str], ...]] = (
    (
        "aws-secret-key",
        "[Kk]"
        + _ci("ey")
        + _key_lookbehinds(
            f"secret{_SEP}access{_SEP}key", "secretaccesskey", f"aws{_SEP}secret{_SEP}key"
        ),
    ),
    (
        "password",
        r"[Pp](?<![/\\][Pp])" + _ci(r"ass(?:word|wd|phrase|(?<=[_.-]pass))|(?<=[_.-]p)wd"),
    ),
    ("secret", r"[Ss](?<![/\\][Ss])" + _ci("ecret")),
    (
        "secret",
        "[Kk]"
        + _ci("ey")
        + _key_lookbehinds(
            *(
                f"{word}{sep}key"
                for word in ("secret", "private", "signing", "encryption", "master", "access")
                for sep in (_SEP, "")
            )
        ),
    ),
    ("token", r"[Tt](?<![/\\][Tt])" + _ci("oken")),
    ("api-key", "[Aa]" + _ci(f"pi{_SEP}?key")),
)


def _assignment(anchor: str) -> str:
    """``<key> = value`` in env files, JSON, YAML, code, headers: ``DB_PASSWORD=x``,
    ``"token": "x"``, ``api_key: x``, ``X-Api-Key: x``, ``os.environ["TOKEN"] = "x"``."""
    return (
        anchor
        # "key: value" needs a space or a quote after the colon ("passwd:dir" is not a value)
        + r"""(?:\\?["'])?\]?[ \t]*(?:(?P<colon>:)(?=[ \t]|\\?["'])[ \t]*"""
        + r"|:?=(?P<spaced>[ \t]+)?)"
        + _value(after_spaced_equals="spaced")
        # after "key:" an unquoted value must end the line, as in YAML and HTTP headers; this
        # keeps prose such as "invalid token: must be 40 characters" intact
        + r"""(?(colon)(?(q)|(?=[ \t]*(?:[#\r\n"'`]|\\[nr"']|\Z))))"""
    )


def _flag(anchor: str) -> str:
    """A CLI flag: ``--password x``, ``--db-password=x``, ``--api-key x``. After a space the
    value must be quoted, hold a digit or symbol, or be 16+ characters long, so that prose
    ("use the --password option") is kept."""
    spaced_value = r"""[ \t]+(?=\\?["']|[A-Za-z]*[^A-Za-z\s'"`\\&,.;:)]|[^\s'"]{16})"""
    return _lead("--") + "(?:[A-Za-z0-9]+-)*" + anchor + "(?:=|" + spaced_value + ")" + _value()


#: after the "@" of URL credentials: a host, then the end of the authority
_HOST_AFTER = r"""(?=[A-Za-z0-9\[][\w.:\[\]-]*(?:[/?#\s'"<>),;]|\Z))"""
_TOKEN_CHARS = r"[\w.~+/=-]"
# The credential after an auth scheme: 8+ token characters with a digit, or 20+ of them.
_SCHEME_VALUE = (
    "(?!"
    + _placeholder(r"(?!" + _TOKEN_CHARS + ")")
    + r"|[a-z]+(?:_[a-z]+)+(?!"  # a snake_case name: expected_authorization
    + _TOKEN_CHARS
    + "))"
    r"(?P<secret>(?=" + _TOKEN_CHARS + "{20}|" + _TOKEN_CHARS + r"*[0-9])" + _TOKEN_CHARS + "{8,})"
)
# After a provider prefix: not a documentation placeholder such as sk_live_xxxxxxxx.
_NOT_FILLER = r"(?![xX*.]{8})"
_PEM_LABEL = r"-----{0}[A-Z0-9 ]{{0,30}}PRIVATE KEY(?: BLOCK)?-----"
_PEM_SPACE = r"(?:\s|\\[nrt])"  # real or JSON-escaped line breaks
_PEM_BODY = _PEM_SPACE + "*+" + r"[\w+/=:,.-]+(?:" + _PEM_SPACE + r"+[\w+/=:,.-]+)*+"


def _inline_password(command: str) -> str:
    """``sshpass ... -p PASSWORD`` or ``docker login ... -p PASSWORD`` (quoted or not; a
    ``$VAR`` or another placeholder is kept)."""
    lead = _lead(command) + (r"[ \t]+login" if command == "docker" else "")
    return (
        lead
        # the command's own line only: a JSON-escaped line break ends it too
        + r"\b(?:[ \t]+(?!-p)(?:(?!\\[nr])\S)+)*?[ \t]+-p[ \t]*"
        + r"""(?P<q>\\{0,3}["'])?(?!"""
        + _placeholder(r"""(?(q)(?P=q)|(?=[\s'"\\]|\Z))""", in_code=False)
        + r""")(?P<secret>(?(q)[^\n"'\\]+|[^\s'"\\]+))"""
    )


# (kind, regex source); order matters: earlier rules win, so formats precede context rules.
_RULES: Final[tuple[tuple[str, str], ...]] = (
    # -- formats -----------------------------------------------------------------------------
    (
        "private-key",
        _PEM_LABEL.format("BEGIN")
        # the scan for END stops at the next BEGIN, so repeated BEGINs stay linear
        + r"(?:(?:(?!-----BEGIN)[\s\S]){0,32768}?"
        + _PEM_LABEL.format("END")
        + "|"
        + _PEM_BODY
        + ")",  # no END line (truncated output): up to the last base64 character
    ),
    (
        # a key body whose BEGIN line was cut off (head+tail truncation dropped it): whole lines
        # of base64 ending with the END line. The first line must start a block (after a blank
        # line or a line not ending in base64), so each block is scanned once.
        "private-key",
        "[A-Za-z0-9+/=]"
        + r"(?:(?<=\A.)|(?<=\n\n.)|(?<=[^\w+/=\n]\n.)|(?<=\\n\\n.)|(?<=[^\w+/=\\]\\n.))"
        + r"[A-Za-z0-9+/=]*+(?:\r?\n|(?:\\r)?\\n)"
        + r"(?:[A-Za-z0-9+/=]++(?:\r?\n|(?:\\r)?\\n))*+"
        + _PEM_LABEL.format("END"),
    ),
    ("jwt", _lead("eyJ") + r"[\w-]{7,}\.eyJ[\w-]{7,}\.[\w-]*"),
    ("anthropic-key", _lead("sk-ant-") + _NOT_FILLER + r"[\w-]{20,}"),
    (
        "openai-key",  # sk-, sk-proj-, sk-svcacct-, sk-admin-: long, mixed case and digits
        _lead("sk-") + r"(?:(?:proj|svcacct|admin|None)-)?(?!ant-)"
        r"(?=[\w-]*[0-9])(?=[\w-]*[A-Z])(?=[\w-]*[a-z])[\w-]{20,}",
    ),
    ("github-token", _lead("gh[pousr]_", r"\w") + _NOT_FILLER + r"[A-Za-z0-9]{36,}(?!\w)"),
    ("github-token", _lead("github_pat_", r"\w") + _NOT_FILLER + r"\w{50,}"),
    ("gitlab-token", _lead("gl") + r"(?:pat|dt|rt|ptt|ft|soat|cbt)-[\w-]{20,}(?:\.[\w-]+)*"),
    ("slack-token", _lead("x") + r"(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}"),
    ("slack-webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[\w/-]{8,})"),
    ("discord-webhook", r"discord(?:app)?\.com/api/webhooks/(?P<secret>[0-9]+/[\w-]{20,})"),
    ("stripe-key", _lead("[rs]k_") + r"(?:live|test)_" + _NOT_FILLER + r"[A-Za-z0-9]{16,}"),
    ("stripe-key", _lead("whsec_") + _NOT_FILLER + r"[A-Za-z0-9]{24,}"),
    ("google-api-key", _lead("AIza") + _NOT_FILLER + r"[\w-]{35}(?![\w-])"),
    ("google-oauth", _lead("GOCSPX-") + r"[\w-]{24,}"),
    ("google-oauth", _lead(r"ya29\.") + r"[\w-]{20,}"),
    (
        "aws-access-key",
        # not AWS's documented example key (AKIAIOSFODNN7EXAMPLE and others ending in EXAMPLE)
        # nor a placeholder: a character six times in a row (AKIAXXXXXXXXXXXXXXXX,
        # AKIA0000000000000000) or a counted run (AKIA1234567890ABCDEF, AKIAABCDEFGHIJKLMNOP)
        _lead("A", "[A-Za-z0-9]")
        + r"(?:KIA|SIA|BIA|CCA)"
        + r"(?![A-Z0-9]{0,10}([A-Z0-9])\1{5}|0?123456789|ABCDEFGHIJ)"
        + r"[A-Z0-9]{16}(?<!EXAMPLE)(?![A-Za-z0-9])",
    ),
    (
        "aws-secret-key",  # needs its key name: a bare 40-char string may be a git sha
        _ANCHORS[0][1] + r"""(?:\\?["'])?\]?[ \t]*(?::=|[:= \t])[ \t]*(?:\\?["'])?"""
        r"(?P<secret>[A-Za-z0-9/+]{40})(?<!EXAMPLEKEY)(?![A-Za-z0-9/+=])",
    ),
    (
        "azure-storage-key",  # AccountKey=... in a connection string
        _lead("AccountKey") + r"[ \t]*=[ \t]*(?P<secret>[A-Za-z0-9+/]{40,}={0,2})",
    ),
    (
        "azure-sas",  # the signature of a shared access signature: ...&sig=<base64, url-encoded>
        r"sig=(?<=[?&;\s\"']sig=)(?P<secret>(?=[A-Za-z0-9%+/=]*[%+/0-9])[A-Za-z0-9%+/=]{30,})",
    ),
    ("sendgrid-key", _lead("SG") + r"\.[\w-]{22}\.[\w-]{43}(?![\w-])"),
    (
        "discord-token",  # base64 of the bot's numeric id, a timestamp, an HMAC
        r"[MNO](?<![\w.-][MNO])[A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![\w.-])",
    ),
    (
        "telegram-token",  # <bot id>:<35 characters>, also inside api.telegram.org/bot<token>/
        r"[0-9](?:(?<=bot[0-9])|(?<![\w:][0-9]))[0-9]{7,9}:(?P<secret>AA[\w-]{33})(?![\w-])",
    ),
    ("huggingface-token", _lead("hf_") + _NOT_FILLER + r"[A-Za-z0-9]{30,}(?!\w)"),
    ("npm-token", _lead("npm_") + _NOT_FILLER + r"[A-Za-z0-9]{36,}(?!\w)"),
    ("pypi-token", _lead("pypi-AgE") + r"[\w-]{60,}"),
    # -- context -----------------------------------------------------------------------------
    (
        # scheme://user:password@host; the password may hold reserved characters written
        # unencoded ("@", ":", "!", "$", ...): as URL parsers read it, it runs to the last "@"
        # of the authority (which ends at "/", "?" or "#"). A port (host:8080/...) is not one.
        # DSN parsers (SQLAlchemy's make_url, libpq's URI form as many tools split it) also
        # take "/", "?" and "#" in a password, up to the first "@": that form is the second.
        "url-password",
        r"""://(?<=[A-Za-z0-9]://)[^\s:/@?#'"<>\[\]]*:"""
        r"(?!" + _placeholder("@" + _HOST_AFTER) + r"""|[0-9]{1,5}(?:[/?#\s'"<>]|\Z))"""
        r"""(?P<secret>[^\s/?#'"<>]{1,256}(?=@)|(?![/?#])[^\s@'"<>]{1,256}(?=@))@""" + _HOST_AFTER,
    ),
    ("bearer-token", _lead(_ci("bearer")) + r"[ \t]+" + _SCHEME_VALUE),
    (
        "auth-header",  # Authorization: Basic|Token|... <credential>
        _ci("authorization")
        + r"""(?:\\?["'])?[ \t]*(?::|=(?=[ \t]*\\?["']))[ \t]*(?:\\?["'])?"""
        + "(?:"
        + _ci("basic|token|bot|digest|negotiate|ntlm|apikey|key")
        + r"[ \t]+)?"
        + _SCHEME_VALUE,
    ),
    (
        "password",  # curl -u user:password
        _lead("curl") + r"""\b(?:(?!curl|\\[nr])[^\n])*?[ \t](?:-u|--user)[ \t]+["']?[^\s:'"]*:"""
        r"(?!" + _placeholder(r"""(?=[\s'"]|\Z)""") + r"""|[0-9]+(?=[\s'"]|\Z))"""
        r"""(?P<secret>[^\s'"]+)""",
    ),
    *(("password", _inline_password(command)) for command in ("sshpass", "docker")),
    *((kind, _assignment(anchor)) for kind, anchor in _ANCHORS[1:]),
    *((kind, _flag(anchor)) for kind, anchor in _ANCHORS[1:]),
)

DEFAULT_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (kind, re.compile(source, re.ASCII)) for kind, source in _RULES
)
"""The default rules as ``(kind, compiled pattern)``, in the order they are applied."""

#: literals some default rules cannot match without, by regex source: the rule is skipped for
#: a text that lacks it (so scanning megabytes of base64 for a key's END line costs nothing)
_NEEDLES: Final[dict[str, str]] = {
    source: needle
    for kind, source in _RULES
    for rule_kind, needle in (
        ("private-key", "PRIVATE KEY"),
        ("telegram-token", ":AA"),
        ("sendgrid-key", "SG."),
        ("azure-sas", "sig="),
        ("azure-storage-key", "AccountKey"),
    )
    if kind == rule_kind
} | {_inline_password(command): command for command in ("sshpass", "docker")}

#: What _assignment puts between a key and its value, up to the ":" or "=" it must have.
_ASSIGNED = r"""(?:\\?["'])?\]?[ \t]*[:=]"""


def _gates() -> dict[re.Pattern[str], tuple[re.Pattern[str], bool]]:
    """Default rules that start with a character class or a case-blind word make ``re`` try
    every position of a text (about 0.5 ms per 70 KB each, against a few µs for a rule that
    starts with a literal). Each gets a gate: a pattern that starts with a literal and that
    every match of the rule contains, so the rule runs only on a text where its gate is found.
    ``True``: the gate is looked for in the text with its letters lower-cased, for the rule's
    case-blind words (the rules fold ASCII letters only, ``re.ASCII``; lower-casing other
    characters can only add matches of the gate, never lose one)."""
    by_kind = {
        "aws-secret-key": ("secret", True),  # its key names all hold "secret"
        "stripe-key": (r"k_(?:live|test)_", False),
        "discord-token": (r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}", False),
        "bearer-token": (r"bearer[ \t]", True),
        "auth-header": ("authorization", True),
    }
    words = dict(
        zip(
            (anchor for _kind, anchor in _ANCHORS[1:]),
            (r"(?:pass(?:word|wd|phrase)?|pwd)", "secret", "key", "token", r"api[_.-]?key"),
            strict=True,
        )
    )
    by_source = {_assignment(anchor): (word + _ASSIGNED, True) for anchor, word in words.items()}
    gates: dict[re.Pattern[str], tuple[re.Pattern[str], bool]] = {}
    for kind, pattern in DEFAULT_PATTERNS:
        gate = by_source.get(pattern.pattern) or by_kind.get(kind)
        if gate is not None and not pattern.pattern.startswith("whsec_"):  # stripe's other rule
            gates[pattern] = (re.compile(gate[0], re.ASCII), gate[1])
    return gates


_GATES: Final = _gates()


class _Skip:
    """Whether a rule cannot match ``text``: its needle is missing (``_NEEDLES``) or its gate
    is not found (``_GATES``). The lower-cased copy the gates need is made once, on first use."""

    __slots__ = ("_lower", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._lower: str | None = None

    def __call__(self, needle: str | None, gate: tuple[re.Pattern[str], bool] | None) -> bool:
        if needle is not None:
            return needle not in self._text
        if gate is None:
            return False
        gate_pattern, lower = gate
        if not lower:
            return gate_pattern.search(self._text) is None
        if self._lower is None:
            self._lower = self._text.lower()
        return gate_pattern.search(self._lower) is None


# For redact_obj: a dict key that names a secret, and a whole value that is only a placeholder.
_SECRET_KEYS: Final = tuple(
    (kind, re.compile(r"[\w.-]*?" + anchor, re.ASCII))
    for kind, anchor in (*_ANCHORS, ("auth-header", _ci("authorization")))
)
_PLACEHOLDER_VALUE: Final = re.compile(_placeholder(r"\Z", in_code=False), re.ASCII)


def _compile(kind: str, pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    if not isinstance(kind, str) or not _KIND_RE.fullmatch(kind):
        raise UserError(
            f"invalid redaction kind {kind!r}: use letters, digits, '-', '_' or '.', "
            "e.g. 'acme-token'"
        )
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    except re.error as exc:
        raise UserError(f"invalid redaction pattern for kind {kind!r}: {exc}") from exc
    if not isinstance(compiled, re.Pattern) or not isinstance(compiled.pattern, str):
        raise UserError(f"redaction pattern for kind {kind!r} must be a str regex")
    if compiled.fullmatch(""):
        raise UserError(
            f"redaction pattern for kind {kind!r} matches the empty string; "
            "make it require at least one character"
        )
    return compiled


#: how many levels of encoding are looked through (JSON inside JSON inside a URL...)
_DECODE_LEVELS: Final = 6
#: a decoded text up to this size is looked through whole at the next level (a key's lines
#: may hold no escape of that level); a larger one line by line, as the first level is
_WHOLE_DECODE_CHARS: Final = 256 * 1024
_ESCAPE: Final = re.compile(
    r"""\\(["\\/bfnrte'])|\\u([0-9A-Fa-f]{4})|%([0-9A-Fa-f]{2})|\\x([0-9A-Fa-f]{2})"""
    # ESC written as an octal escape (printf, echo -e), then a terminal's colour and cursor
    # sequences (CSI), which show nothing: read as if they were not there. Every branch
    # starts with a literal (the CSI's ESC outside its group), so ``re`` scans for those
    # three characters: with the group first it tried every position, ~19 ns a character
    r"|\\0?33(?![0-7])|\x1b(\[[0-?]*[ -/]*[@-~])"
)
_JSON_ESCAPES: Final = {
    "e": "\x1b",
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "'": "'",
}
#: what a secret found in a decoded view is blanked with (same length: offsets stay valid)
_FILLED: Final = re.compile(r"\[_*\]|_{1,2}")


def _filler(size: int) -> str:
    return "_" * size if size < 3 else "[" + "_" * (size - 2) + "]"


def _decode(text: str) -> tuple[str, list[int] | None]:
    """``text`` with its JSON string escapes, URL ``%XX`` escapes and C-style ``\\xHH``,
    ``\\e`` and ``\\033`` escapes decoded and its terminal control sequences (colours,
    cursor moves) left out, and for each decoded character (and the end) the index in
    ``text`` where it starts; ``None`` when nothing was decoded. A ``%XX`` or ``\\xHH`` above
    0x7f and ``\\u`` escapes of surrogates are kept as they are (secrets are ASCII)."""
    out: list[str] = []
    starts: list[int] = []
    pos = 0
    changed = False
    for match in _ESCAPE.finditer(text):
        simple, code, pct, hex_byte, csi = match.groups()
        if simple is not None:
            char = _JSON_ESCAPES[simple]
        elif csi is not None:
            char = ""  # shows nothing on screen: the text reads as if it were not there
        elif code is None and pct is None and hex_byte is None:
            char = "\x1b"  # \033
        else:
            value = int(code or pct or hex_byte, 16)
            if (code is None and value > 0x7F) or 0xD800 <= value <= 0xDFFF:
                continue
            char = chr(value)
        start = match.start()
        out.append(text[pos:start])
        starts.extend(range(pos, start))
        if char:
            out.append(char)
            starts.append(start)
        pos = match.end()
        changed = True
    if not changed:
        return text, None
    out.append(text[pos:])
    starts.extend(range(pos, len(text) + 1))
    return "".join(out), starts


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]``.

    ``extra_patterns`` are ``(kind, pattern)`` pairs; they run first, in the order given, then
    the defaults (unless ``defaults=False``). If a pattern has a group named ``secret`` only that
    group is replaced, otherwise the whole match. A match whose secret part already starts with
    ``[REDACTED:`` is left alone, so redaction is idempotent.
    """

    __slots__ = ("_keys", "_replacers", "_rules", "_use_key_rules")

    def __init__(
        self,
        extra_patterns: Iterable[tuple[str, str | re.Pattern[str]]] = (),
        *,
        defaults: bool = True,
    ) -> None:
        extra = tuple((kind, _compile(kind, pattern)) for kind, pattern in extra_patterns)
        self._rules: tuple[tuple[str, re.Pattern[str]], ...] = extra + (
            DEFAULT_PATTERNS if defaults else ()
        )
        self._use_key_rules = defaults
        #: dict keys already redacted (a structure repeats the same few keys many times)
        self._keys: dict[str, str] = {}
        #: per rule: its kind, pattern and replacement, and what ``_Skip`` checks first
        self._replacers = tuple(
            (
                kind,
                pattern,
                functools.partial(_replace, f"{_MARKER}{kind}]"),
                _NEEDLES.get(pattern.pattern),
                _GATES.get(pattern),
            )
            for kind, pattern in self._rules
        )

    @property
    def patterns(self) -> tuple[tuple[str, re.Pattern[str]], ...]:
        """The active rules as ``(kind, pattern)``, in the order they are applied."""
        return self._rules

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced by ``[REDACTED:<kind>]``.

        The rules run on the text as it is, then on what it decodes to (JSON string escapes
        such as ``\\n`` or ``\\u0041``, URL ``%XX`` escapes, and up to six levels of
        them): a secret found only in the decoded form is replaced where its encoded form
        stands in ``text``."""
        text = self._redact_plain(text)
        if "\\" in text or "%" in text or "\x1b" in text:
            text = self._redact_encoded(text)
        return text

    def redact_name(self, text: str) -> str:
        """``redact`` for a name or an id (a session id, a file name, a path), where a secret
        may be glued to what comes before it by a separator (``n-sk-proj-...``,
        ``agent-ghp_...``): a key the rules would not take after a word character or a
        hyphen in prose is redacted from any separator on."""
        text = self.redact(text)
        start = 0
        while start < len(text):
            found = next(
                (
                    i
                    for i in range(start, len(text))
                    if text[i - 1 : i] in _NAME_SEPARATORS and self.redact(text[i:]) != text[i:]
                ),
                None,
            )
            if found is None:
                return text
            text = text[:found] + self.redact(text[found:])
            start = found + 1
        return text

    def _redact_plain(self, text: str) -> str:
        skip = _Skip(text)
        for _kind, pattern, replace, needle, gate in self._replacers:
            if (needle is None and gate is None) or not skip(needle, gate):
                redacted = pattern.sub(replace, text)
                if redacted is not text:  # ``sub`` returns the text itself when nothing matched
                    text = redacted
                    skip = _Skip(text)
        return text

    def _redact_encoded(self, text: str) -> str:
        found = self._encoded_spans(text, _DECODE_LEVELS)
        if not found:
            return text
        pieces: list[str] = []
        end = len(text)
        for start, stop, kind in sorted(found, key=lambda f: (f[0], -f[1]), reverse=True):
            if stop > end or stop <= start:
                continue  # overlaps a span already replaced
            pieces += [text[stop:end], f"{_MARKER}{kind}]"]
            end = start
        pieces.append(text[:end])
        return "".join(reversed(pieces))

    def _encoded_spans(
        self, text: str, levels: int, *, whole: bool = False
    ) -> list[tuple[int, int, str]]:
        """Secrets that only the decoded form of ``text`` shows, as spans of ``text``. Only
        the lines that hold an escape are decoded, each run of such lines together (a secret
        hidden by an encoding is on the lines of its escapes: a key printed in colour spans
        several); each decoded run is looked through again, whole, for a further level."""
        found: list[tuple[int, int, str]] = []
        if levels <= 0:
            return found
        match = _ESCAPE.search(text)
        while match is not None:
            first, last = (0, len(text)) if whole else (text.rfind("\n", 0, match.start()) + 1, 0)
            if not whole:
                last = _line_end(text, match.end())
                while last < len(text) and _ESCAPE.search(
                    text, last + 1, _line_end(text, last + 1)
                ):
                    last = _line_end(text, last + 1)
            decoded, starts = _decode(text[first:last])
            if starts is not None:
                deeper = len(decoded) <= _WHOLE_DECODE_CHARS  # a large one: by lines again
                inner = self._spans(decoded) + self._encoded_spans(
                    decoded, levels - 1, whole=deeper
                )
                found += [(first + starts[a], first + starts[b], kind) for a, b, kind in inner]
            match = _ESCAPE.search(text, last)
        return found

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        """Where the rules find secrets in ``text``: ``(start, end, kind)``, in rule order
        (each secret found is blanked out before the next rule runs, as ``redact`` replaces
        it with its marker)."""
        spans: list[tuple[int, int, str]] = []
        skip = _Skip(text)
        for kind, pattern, _replace, needle, gate in self._replacers:
            if (needle is not None or gate is not None) and skip(needle, gate):
                continue
            pieces: list[str] = []
            pos = 0
            for match in pattern.finditer(text):
                has_group = "secret" in pattern.groupindex and match.start("secret") >= 0
                start, stop = match.span("secret") if has_group else match.span()
                value = text[start:stop]
                if (
                    stop <= start
                    or value.startswith(_MARKER)
                    or _FILLED.fullmatch(value)
                    or _in_marker(text, match.start())
                ):
                    continue
                spans.append((start, stop, kind))
                pieces += [text[pos:start], _filler(stop - start)]
                pos = stop
            if pieces:
                text = "".join(pieces) + text[pos:]
                skip = _Skip(text)
        return spans

    def redact_obj(self, obj: _T, *, keys: bool = False) -> _T:
        """Return a copy of ``obj`` with every string inside dicts, lists and tuples redacted.

        Dict keys are kept, unless ``keys``: then a string key is redacted like a value (for
        records whose keys came from untrusted input, such as an ingested transcript's). With
        the default rules, a string value under a key that names a secret (``"password"``,
        ``"api_key"``, ``"client_secret"``...) is replaced whole unless it is a placeholder.
        Values that are not strings (numbers, booleans, None) are unchanged.
        """
        return cast(_T, self._redact_any(obj, None, keys))

    def _redact_key(self, key: Any) -> Any:
        if not isinstance(key, str):
            return key
        found = self._keys.get(key)
        if found is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            found = self._keys[key] = self.redact(key)
        return found

    def _redact_any(self, obj: Any, key: Any, keys: bool) -> Any:
        if isinstance(obj, str):
            return self._redact_value(obj, key)
        if isinstance(obj, dict):
            return {
                (self._redact_key(k) if keys else k): self._redact_any(v, k, keys)
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [self._redact_any(v, None, keys) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._redact_any(v, None, keys) for v in obj)
        return obj

    def _redact_value(self, value: str, key: Any) -> str:
        redacted = self.redact(value)
        if not self._use_key_rules or not isinstance(key, str) or not redacted.strip():
            return redacted
        for kind, key_pattern in _SECRET_KEYS:
            if key_pattern.fullmatch(key):
                if _PLACEHOLDER_VALUE.match(redacted.strip()):  # also "[REDACTED:...]"
                    return redacted
                return f"{_MARKER}{kind}]"
        return redacted


#: what may glue a secret into a name or an id (``Redactor.redact_name``)
_NAME_SEPARATORS: Final = frozenset("-_.:/@+=")


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _in_marker(text: str, pos: int) -> bool:
    """Whether ``pos`` lies inside a ``[REDACTED:<kind>]`` marker (whose kind may end in a key
    name such as ``api-key``: it is not the key of an assignment)."""
    start = text.rfind(_MARKER, max(0, pos - 64), pos + 1)
    return start >= 0 and text.find("]", start) >= pos


def _replace(marker: str, match: re.Match[str]) -> str:
    whole = match.group(0)
    if _in_marker(match.string, match.start()):
        return whole
    if "secret" in match.re.groupindex and match.start("secret") >= 0:
        start, end = match.span("secret")
        offset = match.start()
        secret = whole[start - offset : end - offset]
        if not secret or secret.startswith(_MARKER):
            return whole
        return whole[: start - offset] + marker + whole[end - offset :]
    if not whole or whole.startswith(_MARKER):
        return whole
    return marker


@functools.cache
def _default_redactor() -> Redactor:
    return Redactor()


def redact(text: str) -> str:
    """Redact ``text`` with the default rules (see :data:`DEFAULT_PATTERNS`)."""
    return _default_redactor().redact(text)
