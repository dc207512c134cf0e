"""Deterministic generator of the rollout corpus in ``tests/data/rollouts/``.

The corpus is a fixed set of hand-designed rollout files (one JSON line per run segment, the
format of ``sessions/<rollout-id>.jsonl``) used by the compact-rendering tests and by benchmark
figure 5 (phase-one input size). The generated files are committed; regenerate them with

    python benchmarks/corpus.py            # rewrite tests/data/rollouts/*.jsonl
    python benchmarks/corpus.py --check    # exit 1 when the committed files differ

Everything is derived from fixed seeds, so the output is byte-for-byte stable.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from textwrap import dedent
from typing import Any

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "rollouts"
_NO_FINAL = object()


class Rollout:
    """Builds a rollout file segment by segment, the way the recorder would write it."""

    def __init__(
        self,
        rollout_id: str,
        start: str,
        *,
        conversation_key: str | None = None,
        plain_exec: bool = False,
    ):
        self.rollout_id = rollout_id
        self.conversation_key = conversation_key
        # sandmem's Shell prints "Exit code: N", "Wall time: T s", "Output:" before the output;
        # plain_exec rollouts use the bare "exit_code: N" first line that other shells print
        self.plain_exec = plain_exec
        self.wall_clock = random.Random(rollout_id)
        self.clock = datetime.fromisoformat(start)
        self.lines: list[str] = []
        self.history: list[dict[str, Any]] = []  # every item so far, for session replay
        self.input: list[dict[str, Any]] = []
        self.items: list[dict[str, Any]] = []
        self._calls = 0

    def begin(self, *messages: str | dict[str, Any], replay_history: bool = False) -> None:
        new = [user(m) if isinstance(m, str) else m for m in messages]
        self.input = [*self.history, *new] if replay_history else new
        self.history.extend(new)
        self.items = []

    def _add(self, item: dict[str, Any]) -> None:
        self.items.append(item)
        self.history.append(item)

    def say(self, message: str) -> None:
        self._add({"type": "message", "role": "assistant", "content": message})

    def call(self, name: str, **args: Any) -> str:
        self._calls += 1
        digest = hashlib.sha256(f"{self.rollout_id}:{self._calls}".encode()).hexdigest()
        call_id = f"call_{digest[:24]}"
        arguments = json.dumps(args, ensure_ascii=False)
        self._add(
            {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
        )
        return call_id

    def output(self, call_id: str, output: str | list[dict[str, Any]]) -> None:
        self._add({"type": "function_call_output", "call_id": call_id, "output": output})

    def exec(self, cmd: str, exit_code: int, output: str, *, timeout_ms: int = 120_000) -> None:
        call_id = self.call("exec_command", cmd=cmd, timeout_ms=timeout_ms)
        if self.plain_exec:
            self.output(call_id, f"exit_code: {exit_code}\n{output}")
            return
        status = (
            f"Exit code: {exit_code}"
            if exit_code >= 0
            else (f"Command timed out after {timeout_ms} ms and was killed.")
        )
        seconds = timeout_ms / 1000 if exit_code < 0 else self.wall_clock.uniform(0.05, 9.0)
        body = f"Output:\n{output}" if output else "Output: (none)"
        self.output(call_id, f"{status}\nWall time: {seconds:.1f} s\n{body}")

    def patch(self, patch: str, result: str = "Done!") -> None:
        """Record an ``apply_patch`` call; a block starting with a newline is dedented."""
        self.output(self.call("apply_patch", patch=text(patch)), result)

    def end(
        self,
        *,
        minutes: float,
        state: str = "completed",
        exception: tuple[str, str] | None = None,
        final_output: Any = _NO_FINAL,
        interruptions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.clock += timedelta(minutes=minutes)
        if final_output is _NO_FINAL:
            last = self.items[-1] if self.items else {}
            final_output = last.get("content") if state == "completed" else None
        segment: dict[str, Any] = {
            "updated_at": self.clock.isoformat(),
            "rollout_id": self.rollout_id,
        }
        if self.conversation_key:
            segment["conversation_key"] = self.conversation_key
        segment["input"] = self.input
        segment["generated_items"] = self.items
        if final_output is not None:
            segment["final_output"] = final_output
        if interruptions:
            segment["interruptions"] = interruptions
        segment["terminal_metadata"] = {
            "terminal_state": state,
            "exception_type": exception[0] if exception else None,
            "exception_message": exception[1] if exception else None,
            "has_final_output": final_output is not None,
        }
        self.lines.append(json.dumps(segment, ensure_ascii=False, separators=(",", ":")))

    def dump(self) -> str:
        return "\n".join(self.lines) + "\n"


def user(message: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": message}


def text(block: str) -> str:
    """A triple-quoted block opening with a newline, dedented and without that newline; any
    other string unchanged."""
    return dedent(block).removeprefix("\n") if block.startswith("\n") else block


# --- realistic tool output ----------------------------------------------------------------

_WORDS = (
    "cart checkout invoice totals vat discount coupon refund shipping address customer order "
    "payment currency rounding tax ledger export report email webhook retry session token"
).split()


def pytest_verbose(rng: random.Random, failing: list[tuple[str, str, str]], seconds: float) -> str:
    """A ``pytest -v`` log of ~400 tests; ``failing`` = (test id, assertion line, location)."""
    modules = [f"tests/test_{w}.py" for w in _WORDS[:14]]
    tests = [
        f"{m}::test_{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{i}"
        for i, m in enumerate(m for m in modules for _ in range(29))
    ]
    failed_ids = {f[0] for f in failing}
    insert_at = {len(tests) * (k + 3) // (len(failing) + 5): f[0] for k, f in enumerate(failing)}
    for position, test_id in sorted(insert_at.items(), reverse=True):
        tests.insert(position, test_id)
    out = [
        "=" * 29 + " test session starts " + "=" * 30,
        "platform linux -- Python 3.11.9, pytest-8.2.1, pluggy-1.5.0 -- /workspace/.venv/bin/py",
        "cachedir: .pytest_cache",
        "rootdir: /workspace",
        "configfile: pyproject.toml",
        "plugins: cov-5.0.0, anyio-4.4.0, xdist-3.6.1",
        f"collecting ... collected {len(tests)} items",
        "",
    ]
    for n, test_id in enumerate(tests):
        status = "FAILED" if test_id in failed_ids else "PASSED"
        out.append(f"{test_id} {status}".ljust(73) + f"[{100 * (n + 1) // len(tests):3d}%]")
    out.append("")
    if failing:
        out.append("=" * 35 + " FAILURES " + "=" * 35)
        for test_id, assertion, location in failing:
            name = test_id.split("::")[1]
            out += [
                f" {name} ".center(80, "_"),
                "",
                f"    def {name}():",
                '        invoice = make_invoice(lines=[("10.05", "0.19")])',
                f">       {assertion.split('AssertionError: ')[-1]}",
                f"E       {assertion}",
                "",
                f"{location}: AssertionError",
            ]
        out.append("=" * 27 + " short test summary info " + "=" * 28)
        out += [f"FAILED {t} - {a}" for t, a, _ in failing]
    passed = len(tests) - len(failing)
    summary = f"{len(failing)} failed, {passed} passed" if failing else f"{passed} passed"
    out.append(f" {summary} in {seconds:.2f}s ".center(80, "="))
    return "\n".join(out) + "\n"


def ls_la(entries: list[tuple[str, int]], rng: random.Random) -> str:
    out = [f"total {sum(s for _, s in entries) // 1024 + 8}"]
    for name, size in entries:
        is_dir = size == 4096
        mode = "drwxr-xr-x" if is_dir else "-rw-r--r--"
        day = rng.randint(1, 28)
        out.append(
            f"{mode} {rng.randint(2, 9) if is_dir else 1:2d} dev dev {size:7d} "
            f"Apr {day:2d} {rng.randint(8, 19):02d}:{rng.randint(0, 59):02d} {name}"
        )
    return "\n".join(out) + "\n"


def fake_png(rng: random.Random, size: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(size)


def data_url(blob: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(blob).decode()


# --- the rollouts -------------------------------------------------------------------------


def bugfix_pytest() -> Rollout:
    rng = random.Random(1)
    r = Rollout("fix-vat-rounding", "2025-04-28T08:02:11+00:00", plain_exec=True)
    r.begin(
        "CI on main is red: tests/test_totals.py::test_vat_rounding fails since yesterday's "
        "merge. Find the cause and fix it without touching the test."
    )
    failure = "AssertionError: assert Decimal('1.90') == Decimal('1.91')"
    failing = [("tests/test_totals.py::test_vat_rounding", failure, "tests/test_totals.py:48")]
    r.exec("pytest -v", 1, pytest_verbose(rng, failing, 8.42))
    out = text("""
        9f3c2ab Use round() for VAT to drop the quantize helper
        41d07e5 Add per-line VAT rates
        1b8e9f0 Invoice totals: cache subtotal
        c2a7714 Move invoice code into src/invoice
        0aa91de Initial invoice model
        """)
    r.exec("git log --oneline -5 -- src/invoice", 0, out)
    source = text('''
        from __future__ import annotations

        from decimal import Decimal

        from invoice.models import Line


        def line_vat(line: Line) -> Decimal:
            """VAT of one invoice line, rounded to cents."""
            return round(line.net * line.vat_rate, 2)


        def total_vat(lines: list[Line]) -> Decimal:
            return sum((line_vat(line) for line in lines), Decimal(0))
        ''').splitlines()
    source += [f"# helper {rng.choice(_WORDS)} {rng.choice(_WORDS)}" for _ in range(46)]
    numbered = "".join(f"{n:4d}  {line}\n" for n, line in enumerate(source, start=1))
    r.exec("sed -n 1,60p src/invoice/totals.py", 0, numbered)
    r.say(
        "round() on Decimal uses banker's rounding (ROUND_HALF_EVEN), so 1.9095 becomes 1.90; "
        "the finance rules need ROUND_HALF_UP. I'll restore an explicit quantize."
    )
    r.patch('''
        *** Begin Patch
        *** Update File: src/invoice/totals.py
        @@
        -from decimal import Decimal
        +from decimal import ROUND_HALF_UP, Decimal
        @@ def line_vat(line: Line) -> Decimal:
             """VAT of one invoice line, rounded to cents."""
        -    return round(line.net * line.vat_rate, 2)
        +    return (line.net * line.vat_rate).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        *** End Patch
        ''')
    r.exec("pytest -v", 0, pytest_verbose(rng, [], 8.17))
    r.exec(
        "git diff --stat",
        0,
        " src/invoice/totals.py | 4 ++--\n 1 file changed, 2 insertions(+), 2 deletions(-)\n",
    )
    r.say(
        "Fixed. Commit 9f3c2ab replaced the explicit quantize with round(), which rounds half "
        "to even on Decimal; line_vat in src/invoice/totals.py now quantizes to cents with "
        "ROUND_HALF_UP again. The full suite passes."
    )
    r.end(minutes=6.5)
    return r


def repeated_ls() -> Rollout:
    rng = random.Random(2)
    r = Rollout("explore-monorepo-layout", "2025-04-29T13:40:00+00:00")
    r.begin(
        "I'm new to this repo. Where do the web app, the worker and the shared schemas live, "
        "and how do I run each one locally?"
    )
    entries = (
        ". .. .github .gitignore:412 Makefile:2211 README.md:5120 apps docker-compose.yml:1893 "
        "package.json:1022 packages pnpm-lock.yaml:284113 pnpm-workspace.yaml:61 scripts "
        "tsconfig.base.json:734 turbo.json:512"
    )
    sized = [(entry + ":4096").split(":")[:2] for entry in entries.split()]
    listing = ls_la([(name, int(size)) for name, size in sized], rng)
    status = text("""
        On branch main
        Your branch is up to date with 'origin/main'.

        nothing to commit, working tree clean
        """)
    package = text("""
        {
          "name": "acme",
          "private": true,
          "scripts": {"dev": "turbo run dev", "build": "turbo run build", "test": "turbo run test"},
          "devDependencies": {"turbo": "^2.0.4", "typescript": "^5.4.5"},
          "packageManager": "pnpm@9.1.0"
        }
        """)
    r.exec("ls -la", 0, listing)
    r.exec("git status", 0, status)
    r.exec("ls apps packages", 0, "apps:\nweb\nworker\n\npackages:\nschemas\nui\nconfig\n")
    r.exec("ls -la", 0, listing)
    r.exec("cat package.json", 0, package)
    out = text("""
        {
          "name": "@acme/web",
          "scripts": {"dev": "next dev -p 3000", "build": "next build"}
        }
        """)
    r.exec("cat apps/web/package.json | head -20", 0, out)
    r.exec("ls -la", 0, listing)
    r.exec("git status", 0, status)
    r.exec("cat package.json", 0, package)
    worker_dev = '5:    "dev": "tsx watch src/main.ts",\n'
    r.exec("grep -n '\"dev\"' apps/worker/package.json", 0, worker_dev)
    r.exec("ls -la", 0, listing)
    out = text("""
        services:
          postgres:
            image: postgres:16
            ports: ["5432:5432"]
          redis:
            image: redis:7
            ports: ["6379:6379"]
        """)
    r.exec("cat docker-compose.yml", 0, out)
    r.exec("ls -la", 0, listing)
    r.exec("git status", 0, status)
    r.say(
        "Layout: apps/web (Next.js, `pnpm --filter @acme/web dev`, port 3000), apps/worker "
        "(`pnpm --filter @acme/worker dev`, tsx watch src/main.ts), packages/schemas (shared "
        "zod schemas). Start Postgres and Redis first with `docker compose up -d`; "
        "`pnpm dev` at the root runs everything through turbo."
    )
    r.end(minutes=3)
    return r


def base64_blob() -> Rollout:
    rng = random.Random(3)
    logo = fake_png(rng, 27_000)
    old_img = '<img src="https://cdn.acme.test/logo.png" width="240" height="64" alt="Acme">'
    new_img = f'<img src="{data_url(logo)}" width="240" height="64" alt="Acme">'
    r = Rollout("inline-email-logo", "2025-04-30T10:05:00+00:00")
    r.begin(
        "Outlook blocks the remote logo in the welcome email. Inline it into "
        "templates/email/welcome.html as a data URI."
    )
    r.exec(
        "file assets/logo.png && du -b assets/logo.png",
        0,
        text(f"""
        assets/logo.png: PNG image data, 240 x 64, 8-bit/color RGBA, non-interlaced
        {len(logo)}\tassets/logo.png
        """),
    )
    r.exec("base64 assets/logo.png", 0, base64.encodebytes(logo).decode())
    r.exec("grep -n 'logo' templates/email/welcome.html", 0, f"14:      {old_img}\n")
    r.patch(
        text(f"""
        *** Begin Patch
        *** Update File: templates/email/welcome.html
        @@
        -      {old_img}
        +      {new_img}
        *** End Patch
        """)
    )
    html = f"<html><body>{new_img}<p>Hi Sam,</p></body></html>"
    preview = {"subject": "Welcome to Acme", "to": "test@example.com", "html": html}
    r.exec("python scripts/render_email.py welcome --json", 0, json.dumps(preview) + "\n")
    out = text("""
        welcome.html: 37211 bytes
        ok: below the 102400-byte limit where Gmail clips messages
        ERROR: data URI images are stripped by Gmail web; add a cid: attachment fallback
        """)
    r.exec("python scripts/render_email.py welcome --check-size", 1, out)
    r.say(
        "Inlined assets/logo.png into templates/email/welcome.html as a base64 data URI "
        "(37 KB email). The size check passes, but scripts/render_email.py warns that Gmail web "
        "strips data-URI images: we should also attach the logo as a cid: image."
    )
    r.end(minutes=4)
    return r


def csv_analysis() -> Rollout:
    rng = random.Random(4)
    regions = {"EMEA": ["DE", "FR", "GB", "NL"], "AMER": ["US", "CA", "BR"], "APAC": ["JP", "AU"]}
    rows = ["order_id,order_date,region,country,channel,sku,units,unit_price,discount,revenue"]
    for n in range(2400):
        region = rng.choice(sorted(regions))
        date = f"2024-{rng.randint(4, 9):02d}-{rng.randint(1, 28):02d}"
        place = f"{region},{rng.choice(regions[region])},{rng.choice(['web', 'partner', 'direct'])}"
        units, price = rng.randint(1, 40), rng.choice([19.9, 49.0, 129.0, 349.5])
        discount = rng.choice([0, 0, 0.05, 0.1])
        rows.append(
            f"SO-{100200 + n},{date},{place},SKU-{rng.randint(1000, 1060)},{units},{price},"
            f"{discount},{units * price * (1 - discount):.2f}"
        )
    r = Rollout("q3-sales-growth", "2025-05-02T15:20:00+00:00", plain_exec=True)
    r.begin(
        "Using data/sales_2024.csv: which region had the highest Q3 revenue growth over Q2? "
        "Give me the figures."
    )
    head = f"{len(rows)} data/sales_2024.csv\n" + "\n".join(rows[:3]) + "\n"
    r.exec("wc -l data/sales_2024.csv && head -3 data/sales_2024.csv", 0, head)
    r.exec("cat data/sales_2024.csv", 0, "\n".join(rows) + "\n")
    script = text("""
        python - <<'EOF'
        import pandas as pd
        df = pd.read_csv('data/sales_2024.csv', parse_dates=['order_date'])
        df['q'] = df.order_date.dt.quarter
        t = df.pivot_table(index='region', columns='q', values='revenue', aggfunc='sum')
        t['growth_pct'] = (t[3] / t[2] - 1) * 100
        print(t.round(2))
        EOF""")
    out = text("""
        q                2          3  growth_pct
        region
        AMER    512004.31  498114.90       -2.71
        APAC    331870.12  372455.08       12.23
        EMEA    540221.77  561093.65        3.86
        """)
    r.exec(script, 0, out)
    stats = ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]
    describe = "".join(
        f"{k:6s} " + "  ".join(f"{rng.uniform(1, 900):10.2f}" for _ in range(4)) + "\n"
        for k in stats
    )
    r.exec(
        "python -c \"import pandas as pd; print(pd.read_csv('data/sales_2024.csv').describe())\"",
        0,
        "            units  unit_price    discount     revenue\n" + describe,
    )
    r.say(
        "APAC grew the most: Q3 revenue 372,455.08 vs 331,870.12 in Q2 (+12.23%). EMEA grew "
        "+3.86%, AMER shrank -2.71%."
    )
    growth = {"region": "APAC", "q2_revenue": 331870.12, "q3_revenue": 372455.08}
    r.end(minutes=2.5, final_output={**growth, "growth_pct": 12.23})
    return r


def multi_segment() -> Rollout:
    rng = random.Random(5)
    r = Rollout(
        "alice-example-com-thread-7-5c1e09aa",
        "2025-05-05T09:00:00+00:00",
        conversation_key="alice@example.com:thread 7",
    )
    r.begin(
        "GET /health returns 500 when Redis is down. It should answer 200 with "
        'status "degraded" instead, so the load balancer keeps the node.'
    )
    r.exec("grep -rn 'def health' app/", 0, "app/routes/health.py:12:def health():\n")
    code = ["import redis", "from app import cache", "    return ok()"]
    listing = "".join(f"{n:3d}  {rng.choice(code)}\n" for n in range(1, 41))
    r.exec("sed -n 1,40p app/routes/health.py", 0, listing)
    r.patch("""
        *** Begin Patch
        *** Update File: app/routes/health.py
        @@ def health():
        -    cache.ping()
        -    return {"status": "ok"}
        +    try:
        +        cache.ping()
        +    except redis.ConnectionError:
        +        return {"status": "degraded", "redis": "unreachable"}
        +    return {"status": "ok"}
        *** End Patch
        """)
    r.exec("pytest tests/test_health.py -q", 0, f"{'....':41s}[100%]\n4 passed in 0.31s\n")
    r.say(
        "/health now catches redis.ConnectionError in app/routes/health.py and returns 200 "
        '{"status": "degraded"}.'
    )
    r.end(minutes=5)
    r.begin("add a regression test for the bug you fixed", replay_history=True)
    r.patch("""
        *** Begin Patch
        *** Add File: tests/test_health_degraded.py
        +from unittest import mock
        +
        +import redis
        +
        +
        +def test_health_degraded_when_redis_down(client):
        +    with mock.patch("app.cache.ping", side_effect=redis.ConnectionError):
        +        response = client.get("/health")
        +    assert response.status_code == 200
        +    assert response.json()["status"] == "degraded"
        *** End Patch
        """)
    r.exec(
        "pytest tests/test_health.py tests/test_health_degraded.py -q",
        0,
        f"{'.....':41s}[100%]\n5 passed in 0.35s\n",
    )
    r.say(
        "Added tests/test_health_degraded.py: it patches app.cache.ping to raise and checks "
        "the 200 + degraded answer."
    )
    r.end(minutes=30)
    r.begin(
        "Also document the degraded status in docs/api.md, we link it from the runbook.",
        replay_history=True,
    )
    out = text("""
        41:## GET /health
        42-
        43-Returns `{"status": "ok"}` when the service is up.
        """)
    r.exec("grep -n -A3 '/health' docs/api.md", 0, out)
    r.patch("""
        *** Begin Patch
        *** Update File: docs/api.md
        @@ ## GET /health
        -Returns `{"status": "ok"}` when the service is up.
        +Returns 200 with `{"status": "ok"}`, or `{"status": "degraded"}` when Redis is down.
        *** End Patch
        """)
    r.say("docs/api.md now documents the degraded answer of GET /health.")
    r.end(minutes=12)
    return r


def failed_run() -> Rollout:
    rng = random.Random(6)
    r = Rollout("staging-migrations", "2025-05-06T17:45:00+00:00")
    r.begin(
        "Run the pending Alembic migrations against staging (DATABASE_URL is in .env.staging) "
        "and tell me what changed."
    )
    out = text("""
        INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.
        INFO  [alembic.runtime.migration] Will assume transactional DDL.
        3b1f0c2d9e4a (head of branch billing)
        """)
    r.exec("alembic current", 0, out)
    calls = (
        "engine/base:_execute_context engine/default:do_execute pool/base:connect "
        "pool/impl:_do_get engine/create:connect dialects/postgresql/psycopg:connect "
    ) * 4
    site = "/workspace/.venv/lib/python3.11/site-packages/sqlalchemy"
    frames = "".join(
        f'  File "{site}/{module}.py", line {rng.randint(100, 2000)}, in {function}\n'
        f"    {rng.choice(['return fn()', 'self._handle()'])}\n"
        for module, function in (c.split(":") for c in calls.split())
    )
    cause = (
        'connection to server at "staging-db.internal" (10.0.4.12), port 5432 failed: '
        "timeout expired"
    )
    trace = (
        "INFO  [alembic.runtime.migration] Running upgrade 3b1f0c2d9e4a -> 7c9e2f1a0b3d, "
        f"add invoices.paid_at\nTraceback (most recent call last):\n{frames}"
        f"psycopg.OperationalError: {cause}\n\nThe above exception was the direct cause of the "
        f"following exception:\n\nTraceback (most recent call last):\n{frames}"
        f"sqlalchemy.exc.OperationalError: (psycopg.OperationalError) {cause}\n"
    )
    r.exec("alembic -x env=staging upgrade head", 1, trace)
    r.exec(
        "nc -zv -w 5 staging-db.internal 5432",
        1,
        "nc: connect to staging-db.internal (10.0.4.12) port 5432 (tcp) timed out: "
        "Operation now in progress\n",
    )
    r.say(
        "The staging database is unreachable from the sandbox (port 5432 times out). I'll "
        "retry through the bastion tunnel described in docs/ops.md."
    )
    tunnel = "ssh -N -L 15432:staging-db.internal:5432 bastion.internal"
    r.exec(tunnel, -1, "", timeout_ms=600_000)  # -1: killed at the timeout
    error = ("ModelRequestError", "rate limit reached for gpt-5.4 (429); gave up after 5 retries")
    r.end(minutes=11, state="failed", exception=error)
    return r


def max_turns() -> Rollout:
    rng = random.Random(7)
    r = Rollout("flaky-integration-tests", "2025-05-07T07:30:00+00:00")
    r.begin("tests/integration is flaky in CI. Find out which tests are flaky and why.")

    def run(*flaky: str) -> str:
        failing = [
            (f"tests/integration/{test}", "AssertionError: assert 503 == 200",
             f"tests/integration/{test.split('::')[0]}:{rng.randint(20, 90)}")
            for test in flaky
        ]  # fmt: skip
        return pytest_verbose(rng, failing, rng.uniform(40, 70))

    catalog, deliver = "test_sync.py::test_pull_remote_catalog", "test_webhooks.py::test_deliver"
    r.exec("pytest tests/integration -v -p no:randomly", 1, run(catalog))
    r.exec("pytest tests/integration -v -p no:randomly", 0, run())
    r.exec("pytest tests/integration -v -p no:randomly", 1, run(catalog, deliver))
    out = text("""
        tests/integration/conftest.py:18:SANDBOX_URL = "https://sandbox-api.acme.test"
        tests/integration/test_sync.py:9:pytestmark = pytest.mark.network
        """)
    r.exec("grep -rn 'sandbox-api' tests/integration | head", 0, out)
    ping = "curl -s -o /dev/null -w '%{http_code}' https://sandbox-api.acme.test/ping"
    for _ in range(3):
        r.exec(ping, 0, "503")
    r.exec("pytest tests/integration/test_sync.py -v -p no:randomly", 1, run(catalog))
    error = ("MaxTurnsExceeded", "Max turns (10) exceeded")
    r.end(minutes=25, state="max_turns_exceeded", exception=error)
    r.begin("continue, but skip the tests marked network; CI can't reach the sandbox API anyway")
    r.exec("pytest tests/integration -v -m 'not network' -p no:randomly", 0, run())
    r.exec("pytest tests/integration -v -m 'not network' -p no:randomly", 0, run())
    r.say(
        "Without the network-marked tests the suite passed twice in a row. The flaky ones are "
        f"tests/integration/{catalog} and tests/integration/{deliver}: both call "
        "https://sandbox-api.acme.test, which answers 503 intermittently. Run CI with "
        "-m 'not network' and mark test_webhooks.py with pytest.mark.network too."
    )
    r.end(minutes=9)
    return r


def poetry_correction() -> Rollout:
    rng = random.Random(8)
    names = (
        "attrs certifi charset-normalizer click coverage idna iniconfig mypy mypy-extensions "
        "packaging pluggy pydantic pydantic-core pytest pytest-cov requests ruff "
        "typing-extensions urllib3 anyio httpx httpcore h11 sniffio rich markdown-it-py "
        "pygments mdurl"
    ).split()
    pkgs = [(n, f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}") for n in names]
    pip_log = ""
    for line, (name, version) in enumerate(pkgs, start=1):
        wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        bars = "".join(f"\r     {'━' * k:40s} {k * 2.5:.1f}/100.0 kB" for k in (10, 25, 40))
        pip_log += (
            f"Collecting {name}=={version} (from -r requirements-dev.txt (line {line}))\n"
            f"  Downloading {wheel}.metadata ({rng.randint(2, 40)}.{rng.randint(0, 9)} kB)\n"
            f"  Downloading {wheel} ({rng.randint(20, 900)} kB)\n{bars}\n"
        )
    pip_log += f"Installing collected packages: {', '.join(names)}\n"
    pip_log += f"Successfully installed {' '.join(f'{n}-{v}' for n, v in pkgs)}\n"
    r = Rollout("dev-env-setup", "2025-05-08T11:00:00+00:00")
    r.begin("Set up the dev environment and run the unit tests.")
    r.exec("pip install -r requirements-dev.txt", 0, pip_log)
    r.exec("pytest -q tests/unit", 0, "." * 188 + "\n188 passed in 3.92s\n")
    r.say("Installed requirements-dev.txt with pip and ran tests/unit: 188 passed.")
    r.end(minutes=4)
    r.begin(
        "no, use poetry instead of pip — this repo is managed with poetry (see pyproject.toml), "
        "and please never install into the system interpreter again."
    )
    uninstall = "".join(
        f"Found existing installation: {n} {v}\nUninstalling {n}-{v}:\n"
        f"  Successfully uninstalled {n}-{v}\n"
        for n, v in pkgs
    )
    r.exec("pip uninstall -y -r requirements-dev.txt", 0, uninstall)
    installs = "".join(f"  - Installing {n} ({v})\n" for n, v in pkgs)
    poetry_log = text(f"""
        Creating virtualenv acme-api in /workspace/.venv
        Installing dependencies from lock file

        Package operations: {len(pkgs)} installs, 0 updates, 0 removals

        """)
    poetry_log += installs + "\nInstalling the current project: acme-api (0.9.0)\n"
    r.exec("poetry install --with dev", 0, poetry_log)
    r.exec("poetry run pytest -q tests/unit", 0, "." * 188 + "\n188 passed in 3.88s\n")
    r.say(
        "Removed the pip-installed packages from the system interpreter and set up the project "
        "with `poetry install --with dev` (virtualenv in .venv). `poetry run pytest -q "
        "tests/unit`: 188 passed. I'll use poetry for this repo from now on."
    )
    r.end(minutes=7)
    return r


def image_view() -> Rollout:
    rng = random.Random(9)
    shot, after = fake_png(rng, 36_000), fake_png(rng, 35_000)
    r = Rollout("navbar-mobile-alignment", "2025-05-09T16:10:00+00:00")
    ask = "The logout button in the navbar is misaligned on mobile, see the screenshot. Fix it."
    r.begin({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": ask},
        {"type": "input_image", "image_url": data_url(shot), "detail": "auto"},
    ]})  # fmt: skip
    out = text("""
        web/static/css/navbar.css:88:.navbar__logout {
        web/static/css/navbar.css:131:  .navbar__logout { float: right; margin-top: 7px; }
        """)
    r.exec("grep -rn 'navbar__logout' web/static/css", 0, out)
    css = ["  display: flex;", "}", "@media (max-width: 640px) {"]
    listing = "".join(f"{n}  {rng.choice(css)}\n" for n in range(120, 141))
    r.exec("sed -n 120,140p web/static/css/navbar.css", 0, listing)
    r.output(
        r.call("view_image", path="screenshots/navbar-mobile.png"),
        [{"type": "input_image", "image_url": data_url(shot)}],
    )
    r.patch("""
        *** Begin Patch
        *** Update File: web/static/css/navbar.css
        @@ @media (max-width: 640px) {
        -  .navbar__logout { float: right; margin-top: 7px; }
        +  .navbar__logout { margin-left: auto; align-self: center; }
        *** End Patch
        """)
    r.exec(
        "npx playwright screenshot --viewport-size=390,844 http://localhost:3000 "
        "screenshots/navbar-mobile-after.png",
        0,
        "Navigating to http://localhost:3000\n"
        "Capturing screenshot into screenshots/navbar-mobile-after.png\n",
    )
    r.output(
        r.call("view_image", path="screenshots/navbar-mobile-after.png"),
        [{"type": "input_image", "image_url": data_url(after)}],
    )
    r.say(
        "The mobile rule floated the button with a 7px top margin inside a flex row. In "
        "web/static/css/navbar.css it now uses margin-left: auto; align-self: center; the "
        "new screenshot (screenshots/navbar-mobile-after.png) shows it aligned."
    )
    r.end(minutes=8)
    return r


_CRATES = (
    "proc-macro2 unicode-ident quote syn serde serde_derive memchr minimal-lexical nom libc "
    "cfg-if autocfg log itoa ryu serde_json once_cell smallvec bitflags hashbrown equivalent "
    "indexmap toml_datetime winnow toml_edit toml thiserror-impl thiserror aho-corasick "
    "regex-syntax regex-automata regex anyhow clap_lex strsim anstyle utf8parse anstyle-parse "
    "colorchoice anstream clap_builder heck clap_derive clap tracing-core pin-project-lite "
    "tracing-attributes tracing lazy_static sharded-slab thread_local nu-ansi-term "
    "tracing-subscriber similar insta"
).split()
_RUSTC = "/root/.rustup/toolchains/1.78.0-x86_64-unknown-linux-gnu/bin/rustc"
_RUST_ERRORS = text("""
    error[E0308]: mismatched types
       --> src/parser.rs:212:17
        |
    212 |     let (rest, key) = take_while1(is_key_char)(input)?;
        |                 ^^^^^^^^^^^^ expected `IResult<&str, &str>`, found `Result<_, _>`

    error[E0599]: no method named `complete` found for enum `nom::Err` in the current scope
       --> src/parser.rs:240:34
        |
    240 |     value(input).map_err(|e| e.complete())
        |                                  ^^^^^^^^ method not found in `Err<Error<&str>>`

    warning: unused import: `nom::sequence::tuple`
     --> src/parser.rs:5:5

    Some errors have detailed explanations: E0308, E0599.
    For more information about an error, try `rustc --explain E0308`.
    warning: `confparse` (lib) generated 1 warning
    error: could not compile `confparse` (lib) due to 2 previous errors; 1 warning emitted

    Caused by:
      process didn't exit successfully: `RUSTC --crate-name confparse src/lib.rs` (exit status: 1)
    """).replace("RUSTC", _RUSTC)


def cargo_build_log(rng: random.Random, *, ok: bool) -> str:
    """``cargo build -v`` output; a failed build prints its errors two thirds in, while the
    rest of the parallel build keeps compiling."""
    out = []
    for name in _CRATES:
        version = f"{rng.randint(0, 2)}.{rng.randint(0, 40)}.{rng.randint(0, 30)}"
        source = f"/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/{name}-{version}"
        out.append(f"   Compiling {name} v{version}")
        out.append(
            f"     Running `{_RUSTC} --crate-name {name.replace('-', '_')} --edition=2021 "
            f"{source}/src/lib.rs --error-format=json --json=diagnostic-rendered-ansi,artifacts,"
            "future-incompat --crate-type lib --emit=dep-info,metadata,link -C embed-bitcode=no "
            f"-C debuginfo=2 --cfg 'feature=\"default\"' --cfg 'feature=\"std\"' -C metadata="
            f"{rng.randbytes(8).hex()} -C extra-filename=-{rng.randbytes(8).hex()} --out-dir "
            "/workspace/target/debug/deps -L dependency=/workspace/target/debug/deps "
            "--cap-lints allow`"
        )
    out.append("   Compiling confparse v0.4.0 (/workspace)")
    if ok:
        out.append("    Finished `dev` profile [unoptimized + debuginfo] target(s) in 41.07s")
        return "\n".join(out) + "\n"
    cut = len(out) * 2 // 3
    return "\n".join(out[:cut]) + "\n" + _RUST_ERRORS + "\n".join(out[cut:]) + "\n"


def build_log() -> Rollout:
    rng = random.Random(10)
    r = Rollout("nom7-upgrade-build", "2025-05-10T12:00:00+00:00")
    r.begin(
        "cargo build fails after bumping nom to 7.1. Please fix the parser so it compiles "
        "and the tests pass."
    )
    r.exec("cargo build -v 2>&1", 101, cargo_build_log(rng, ok=False))
    code = ["    let (rest, key) = take_while1(is_key_char)(input)?;", "}"]
    listing = "".join(f"{n}  {rng.choice(code)}\n" for n in range(205, 246))
    r.exec("sed -n 205,245p src/parser.rs", 0, listing)
    r.patch("""
        *** Begin Patch
        *** Update File: src/parser.rs
        @@
        -use nom::sequence::tuple;
        @@ fn key(input: &str) -> IResult<&str, &str> {
        -    let (rest, key) = take_while1(is_key_char)(input)?;
        +    let (rest, key) = take_while1(is_key_char).parse(input)?;
        @@ fn entry(input: &str) -> Result<Entry, ParseError> {
        -    value(input).map_err(|e| e.complete())
        +    value(input).map_err(ParseError::from)
        *** End Patch
        """)
    r.exec("cargo build -v 2>&1", 0, cargo_build_log(rng, ok=True))
    out = text("""
        test result: ok. 57 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out

           Doc-tests confparse

        running 3 tests
        test result: ok. 3 passed; 0 failed
        """)
    r.exec("cargo test 2>&1 | tail -5", 0, out)
    r.say(
        "nom 7 removed Err::complete and the closure call style changed: src/parser.rs now "
        "uses .parse(input) and maps errors with ParseError::from. cargo build succeeds and "
        "cargo test passes (57 + 3 doc tests)."
    )
    r.end(minutes=14)
    return r


def approval_interrupted() -> Rollout:
    r = Rollout("rotate-staging-key", "2025-05-11T09:30:00+00:00")
    r.begin(
        "Rotate the billing API key for staging (new one is in the vault at "
        "billing/staging/api_key) and restart the billing service."
    )
    r.exec("grep -n 'BILLING_API_KEY' config/staging.env", 0, "7:BILLING_API_KEY=<redacted>\n")
    r.output(r.call("vault_read", path="billing/staging/api_key"), '{"value": "<secret>"}')
    r.patch("""
        *** Begin Patch
        *** Update File: config/staging.env
        @@
        -BILLING_API_KEY=<redacted>
        +BILLING_API_KEY=${vault:billing/staging/api_key}
        *** End Patch
        """)
    args = {"service": "billing-api", "environment": "staging"}
    restart = r.call("restart_service", **args)
    approval = {"type": "tool_approval_item", "tool_name": "restart_service", "call_id": restart}
    approval["arguments"] = json.dumps(args)
    r.end(minutes=2, state="interrupted", interruptions=[approval], final_output=None)
    r.begin("approved")
    r.output(restart, "billing-api restarted on staging (3/3 pods ready)")
    r.say(
        "config/staging.env now reads the key from vault (billing/staging/api_key) and "
        "billing-api was restarted on staging; all 3 pods are ready."
    )
    r.end(minutes=3)
    return r


def refactor_torn_write() -> Rollout:
    rng = random.Random(12)
    r = Rollout("split-utils-module", "2025-05-12T14:00:00+00:00")
    r.begin(
        "src/app/utils.py is 2k lines. Move the date helpers into src/app/dates.py, rename "
        "helpers.py to text.py, and drop the dead legacy_dates module."
    )
    r.output(
        r.call("search_docs", query="date helpers import conventions"),
        "docs/contributing.md: 'Import helpers from their module, never via app.utils *'.",
    )
    r.exec(
        "grep -n '^def ' src/app/utils.py | wc -l && grep -rln 'legacy_dates' src tests",
        0,
        "214\nsrc/app/legacy_dates.py\n",
    )
    helpers = "".join(
        f"+def {rng.choice(_WORDS)}_date_{n}(value):\n+    return parse(value)\n+\n"
        for n in range(60)
    )
    rest = text("""
        *** Update File: src/app/helpers.py
        *** Move to: src/app/text.py
        @@
        -import re
        +import re
        +import unicodedata
        *** Delete File: src/app/legacy_dates.py
        *** Update File: src/app/utils.py
        @@
        -def parse_date(value):
        -    return parse(value)
        *** End Patch
        """)
    header = (
        "*** Begin Patch\n*** Add File: src/app/dates.py\n+from __future__ import annotations\n"
    )
    r.patch(header + "+\n" + helpers + rest)
    modules = ["utils", "text", "dates", "views"]
    lint = "".join(
        f"src/app/{rng.choice(modules)}.py:{rng.randint(1, 900)}:{rng.randint(1, 40)}: "
        f"F401 [*] `{rng.choice(_WORDS)}` imported but unused\n"
        for _ in range(140)
    )
    lint += "Found 140 errors.\n[*] 140 fixable with the `--fix` option.\n"
    r.exec("ruff check src", 1, lint)
    fixed = "Found 140 errors (140 fixed, 0 remaining).\n" + "." * 302 + "\n302 passed in 6.10s\n"
    r.exec("ruff check --fix src && pytest -q", 0, fixed)
    r.say(
        "Moved the date helpers to src/app/dates.py, renamed src/app/helpers.py to "
        "src/app/text.py and deleted src/app/legacy_dates.py; ruff --fix removed 140 unused "
        "imports and the 302 tests pass."
    )
    r.end(minutes=9)
    r.begin("now update the imports in the notebooks too")
    r.exec("grep -rln 'app.utils import' notebooks", 0, "notebooks/churn.ipynb\n")
    r.end(minutes=1, state="failed", exception=("KeyboardInterrupt", ""))
    r.lines[-1] = r.lines[-1][: len(r.lines[-1]) // 2]  # the process died mid-write
    return r


ROLLOUTS: dict[str, Callable[[], Rollout]] = {
    "bugfix-pytest": bugfix_pytest,
    "repeated-ls": repeated_ls,
    "base64-blob": base64_blob,
    "csv-analysis": csv_analysis,
    "multi-segment": multi_segment,
    "failed-run": failed_run,
    "max-turns": max_turns,
    "poetry-correction": poetry_correction,
    "image-view": image_view,
    "build-log": build_log,
    "approval-interrupted": approval_interrupted,
    "refactor-torn-write": refactor_torn_write,
}


def build_corpus() -> dict[str, str]:
    """File name -> file text for every corpus rollout."""
    return {f"{name}.jsonl": make().dump() for name, make in ROLLOUTS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="verify instead of writing")
    args = parser.parse_args(argv)
    corpus = build_corpus()
    if args.check:
        stale = [
            n
            for n, text in corpus.items()
            if not (CORPUS_DIR / n).exists() or (CORPUS_DIR / n).read_text("utf-8") != text
        ]
        for name in stale:
            print(f"stale: {CORPUS_DIR / name}", file=sys.stderr)
        return 1 if stale else 0
    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in corpus.items():
        (CORPUS_DIR / name).write_bytes(text.encode("utf-8"))
    total = sum(len(t.encode()) for t in corpus.values())
    print(f"wrote {len(corpus)} rollouts ({total} bytes) to {CORPUS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
