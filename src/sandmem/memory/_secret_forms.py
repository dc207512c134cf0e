"""A secret's derived forms: what sandmem's own derivations make of a secret a redaction rule
matched, so that redaction takes those out too.

A rule matches a secret as it is written (``ACME-PROJ-77x9``). Text sandmem derives from a
transcript changes it: a rollout summary's slug and file name, a skill's name and MEMORY.md's
``Keywords:`` line are lower-case and split into words (``acme-proj-77x9``; ``acme, proj``), a
model may write it in upper case, ASCII folding drops accents, and a heading or a quote cut at
its limit keeps a prefix before ``…`` (``ACME-PR…``) or a suffix after it. ``SecretForms`` is
built from the secrets found (``found``: the values the rules match, in every encoding the
rules decode) and covers those forms:

- ``redact(text)``: each secret in any case, with any separators (or none) between its words,
  ASCII-folded; a prefix of it (four letters or digits at least) just before an ellipsis and a
  suffix just after one; and on a ``Keywords:`` line every word that is part of a secret's
  word (or holds one) — all replaced with ``[REDACTED:<kind>]``.
- ``redact_name(name)``: a file or folder name: the same forms, and every word of the name
  that is part of a secret's word, become ``redacted`` (a name keeps to ``[a-z0-9._-]``).

A secret shorter than ``MIN_SECRET`` characters is left to its rule (its words would match
too much); a secret's word shorter than ``MIN_WORD`` is matched only inside the whole form.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sandmem.redaction import Redactor

MIN_SECRET = 4
MIN_WORD = 3
#: the fewest letters and digits of a secret a cut prefix or suffix must keep to be matched
MIN_PART = 4
NAME_MARK = "redacted"

_ALNUM = re.compile(r"[a-z0-9]+")
_NAME_WORD = re.compile(r"[A-Za-z0-9]+")
_ELLIPSIS = re.compile(r"…|\.\.\.")
#: what a cut leaves around an ellipsis: the run of name-like characters next to it
_BEFORE_CUT = re.compile(r"[A-Za-z0-9_.\-/+=:@]+\Z")
_AFTER_CUT = re.compile(r"\A[A-Za-z0-9_.\-/+=:@]+")
#: how far from an ellipsis a cut secret is looked for (a secret is shorter)
_CUT_WINDOW = 256
_KEYWORDS_LINE = re.compile(r"^[\W_]*keywords?\b[^:\n]{0,20}:.*$", re.IGNORECASE | re.MULTILINE)
_WORDISH = re.compile(r"[A-Za-z0-9_]+")
_MARK_RUN = re.compile(rf"{NAME_MARK}(?:[-_. ]+{NAME_MARK})+")


def fold(text: str) -> str:
    """``text`` as sandmem's slugs and keywords see it: NFKD-folded to ASCII, lower-case."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


@dataclass(frozen=True)
class _Secret:
    value: str
    kind: str
    words: tuple[str, ...]  # folded letters-and-digits runs

    @property
    def compact(self) -> str:
        return "".join(self.words)


_Mark = Callable[[_Secret], str]


def secret_values(redactor: Redactor, text: str) -> list[tuple[str, str]]:
    """Every ``(value, kind)`` the redactor's rules find in ``text``, also in the forms its
    decoding of escapes finds (the decoded value)."""
    from sandmem.redaction import _decode

    found = [(text[a:b], kind) for a, b, kind in redactor._spans(text)]
    if "\\" in text or "%" in text or "\x1b" in text:
        for a, b, kind in redactor._encoded_spans(text, 6):
            decoded, _starts = _decode(text[a:b])
            found.append((decoded, kind))
    return found


def rollout_secret_values(redactor: Redactor, text: str) -> list[tuple[str, str]]:
    """``secret_values`` of a JSONL transcript, looked for in its decoded strings: each line
    that parses as JSON gives its strings (keys too), each other line itself. JSON's own
    escapes (``\\"``, ``\\n``, ``\\u0041``) are undone by the parser, so the pass over
    escapes runs only where a decoded string still holds one, not on every line of the file
    (a third of the time on figure 8's rollouts); a secret is found as the text derived from
    the transcript holds it."""
    found: list[str] = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            found.append(line)
            continue
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                found.append(item)
            elif isinstance(item, dict):
                found.extend(k for k in item if isinstance(k, str))
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
    return secret_values(redactor, "\n".join(found))


def case_blind(rules: Iterable[tuple[str, str | re.Pattern[str]]]) -> Redactor:
    """A redactor that finds what ``rules`` (patterns of one's own) match in any case: a
    derived form is lower-case (a slug, a keyword) where the pattern was written for the
    secret as it is. Only for finding secrets: the defaults keep their own case rules."""
    compiled = [
        (kind, re.compile(p.pattern if isinstance(p, re.Pattern) else p, re.IGNORECASE))
        for kind, p in rules
    ]
    return Redactor(compiled, defaults=False)


def own_rules(redactor: Redactor) -> list[tuple[str, re.Pattern[str]]]:
    """The rules of ``redactor`` that are not the built-in ones (a layout's
    ``redact_patterns``, ``redact-history``'s pattern)."""
    from sandmem.redaction import DEFAULT_PATTERNS

    return [rule for rule in redactor.patterns if rule not in DEFAULT_PATTERNS]


class SecretForms:
    """The derived forms of a set of secrets (see the module docstring)."""

    def __init__(self, secrets: Iterable[tuple[str, str]] = ()) -> None:
        chosen: dict[str, _Secret] = {}
        for value, kind in secrets:
            value = value.strip()
            words = tuple(_ALNUM.findall(fold(value)))
            if len(value) >= MIN_SECRET and words and value not in chosen:
                chosen[value] = _Secret(value, kind, words)
        self._secrets = sorted(chosen.values(), key=lambda s: -len(s.value))
        self.values = [(s.value, s.kind) for s in self._secrets]
        self._whole = [(s, _whole_pattern(s)) for s in self._secrets]
        self._words = {w: s.kind for s in self._secrets for w in s.words if len(w) >= MIN_WORD}
        self._strong = {w: k for w, k in self._words.items() if _strong(w)}

    @classmethod
    def found(
        cls, redactor: Redactor, texts: Iterable[str], also: Redactor | None = None
    ) -> SecretForms:
        """The forms of every secret ``redactor`` (and ``also``: ``case_blind`` patterns)
        finds in ``texts``."""
        finders = (redactor,) if also is None else (redactor, also)
        return cls(v for text in texts for r in finders for v in secret_values(r, text))

    @classmethod
    def in_rollout(cls, redactor: Redactor, text: str, also: Redactor | None = None) -> SecretForms:
        """``found`` for one JSONL transcript (``rollout_secret_values``)."""
        finders = (redactor,) if also is None else (redactor, also)
        return cls(v for r in finders for v in rollout_secret_values(r, text))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    # ------------------------------------------------------------ text

    def redact(self, text: str) -> str:
        """``text`` with every derived form of the secrets replaced by ``[REDACTED:<kind>]``."""
        if not self._secrets:
            return text
        folded = fold(text)
        for secret, pattern in self._whole:
            if secret.words[0] in folded:  # a whole form holds its first word, folded
                text = pattern.sub(f"[REDACTED:{secret.kind}]", text)
        text = self._cuts(text, lambda s: f"[REDACTED:{s.kind}]")
        return _KEYWORDS_LINE.sub(self._keywords_line, text)

    def _keywords_line(self, match: re.Match[str]) -> str:
        line = match.group(0)
        head, sep, rest = line.partition(":")

        def word(m: re.Match[str]) -> str:
            kind = self.word_kind(m.group(0))
            return m.group(0) if kind is None else f"[REDACTED:{kind}]"

        return head + sep + _WORDISH.sub(word, rest)

    def word_kind(self, word: str, *, strong: bool = False) -> str | None:
        """The kind of the secret ``word`` is part of (or holds a word of): every folded run of
        letters and digits in it is compared (with ``strong``, only to the secrets' words that
        look random: ``_strong``); ``None`` when none is."""
        words = self._strong if strong else self._words
        for run in _ALNUM.findall(fold(word)):
            for secret_word, kind in words.items():
                if _part_of(run, secret_word):
                    return kind
        return None

    def _cuts(self, text: str, mark: _Mark) -> str:
        """A prefix of a secret just before an ellipsis, a suffix just after one."""
        if not _ELLIPSIS.search(text):
            return text
        out: list[str] = []
        pos = 0
        for cut in _ELLIPSIS.finditer(text):
            if cut.start() < pos:
                continue
            before = text[pos : cut.start()]
            near = max(0, len(before) - _CUT_WINDOW)  # a cut keeps a short run beside it
            tail = _BEFORE_CUT.search(before, near)
            if tail is not None:
                before = before[: tail.start()] + self._cut_tail(tail.group(0), mark)
            out += [before, cut.group(0)]
            pos = cut.end()
            head = _AFTER_CUT.search(text[pos : pos + _CUT_WINDOW])
            if head is not None:
                out.append(self._cut_head(head.group(0), mark))
                pos += head.end()
        out.append(text[pos:])
        return "".join(out)

    def _cut_tail(self, chunk: str, mark: _Mark) -> str:
        for i in range(len(chunk)):
            if not chunk[i].isalnum():
                continue
            part = "".join(_ALNUM.findall(fold(chunk[i:])))
            if len(part) < MIN_PART:
                break
            for secret in self._secrets:
                if secret.compact.startswith(part):
                    return chunk[:i] + mark(secret)
        return chunk

    def _cut_head(self, chunk: str, mark: _Mark) -> str:
        for j in range(len(chunk), 0, -1):
            if not chunk[j - 1].isalnum():
                continue
            part = "".join(_ALNUM.findall(fold(chunk[:j])))
            if len(part) < MIN_PART:
                break
            for secret in self._secrets:
                if secret.compact.endswith(part):
                    return mark(secret) + chunk[j:]
        return chunk

    # ------------------------------------------------------------ names

    def redact_name(self, name: str, *, words: bool = True) -> str:
        """``name`` (one path component) with every derived form of the secrets, and every
        word that is part of one, replaced by ``redacted``; the same name when none is.
        ``words=False`` (a name not derived from the secret's text: a skill's folder a person
        named) takes a single word out only when it is part of a secret's word that looks
        random, so a folder named ``deploy`` survives a secret ``deploy-key-9f8e7d6c``."""
        if not self._secrets:
            return name
        clean = name
        for _secret, pattern in self._whole:
            clean = pattern.sub(NAME_MARK, clean)
        clean = self._cuts(clean, lambda _s: NAME_MARK)

        def word(m: re.Match[str]) -> str:
            if m.group(0) == NAME_MARK:
                return NAME_MARK
            kind = self.word_kind(m.group(0), strong=not words)
            return m.group(0) if kind is None else NAME_MARK

        clean = _NAME_WORD.sub(word, clean)
        return name if clean == name else _MARK_RUN.sub(NAME_MARK, clean)


def _strong(word: str) -> bool:
    """A secret's word that looks random (letters and digits, or long): a part of it in a
    name is the secret, not a word anyone would choose."""
    has_digit, has_alpha = any(c.isdigit() for c in word), any(c.isalpha() for c in word)
    return len(word) >= MIN_PART and ((has_digit and has_alpha) or len(word) >= 12)


def _part_of(run: str, secret_word: str) -> bool:
    """Whether a word's run of letters and digits is a secret's word, a part of one (at least
    ``MIN_PART`` long: a cut or a split keeps that much), or holds one."""
    if run == secret_word:
        return True
    return (len(run) >= MIN_PART and run in secret_word) or (
        len(secret_word) >= MIN_PART and secret_word in run
    )


def _whole_pattern(secret: _Secret) -> re.Pattern[str]:
    """The secret as written, in any case; and its folded words with any separators between
    them (none too), in any case."""
    joined = r"[\W_]{0,3}".join(re.escape(w) for w in secret.words)
    return re.compile(f"{re.escape(secret.value)}|{joined}", re.IGNORECASE)


def clean_name(name: str, redactor: Redactor, forms: SecretForms, *, words: bool = True) -> str:
    """A name (one path component) without the secrets ``redactor``'s rules find in it nor
    the derived forms of ``forms`` (``words``: see ``SecretForms.redact_name``); what is taken
    out becomes ``redacted``."""
    marked = re.sub(r"\[REDACTED:[^\]]*\]", NAME_MARK, redactor.redact_name(name))
    return forms.redact_name(marked, words=words)
