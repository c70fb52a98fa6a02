"""A local stand-in for the upstream indexes: serves a snapshot directory over HTTP on 127.0.0.1.

Paths are /INDEX/PATH, as a snapshot is laid out (gpuenv/kb/sources.py). A wheel is made on the fly
from its recorded METADATA (a real zip, larger than one range read) and served with Range support, so
the range-read path runs for real. `faults` makes a path prefix misbehave: "down" (HTTP 503), "garbage"
(200 with bytes that are no index page), "slow" (answers after `slow_s`), "redirect" (302 elsewhere).
"""

from __future__ import annotations

import functools
import io
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

PADDING = bytes(range(256)) * 2048  # 512 KiB stored uncompressed: the METADATA is not in the first range read


@functools.lru_cache(maxsize=256)
def make_wheel(name: str, metadata: bytes) -> bytes:
    dist = "-".join(name.split("-")[:2]) + ".dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(f"{dist}/METADATA", metadata, compress_type=zipfile.ZIP_DEFLATED)
        wheel.writestr(f"{name.split('-')[0]}/_padding.bin", PADDING)
        wheel.writestr(f"{dist}/RECORD", b"")
    return buffer.getvalue()


class _Handler(BaseHTTPRequestHandler):
    server: SnapshotServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        fault = next((f for p, f in self.server.faults.items() if self.path.startswith(p)), None)
        if fault == "slow":
            time.sleep(self.server.slow_s)
        if fault == "down":
            return self._send(503, b"upstream unavailable")
        if fault == "garbage":
            garbage = b"\x00\x01 this is not what you asked for \xff" * 4096
            return self._ranged(garbage) if "Range" in self.headers else self._send(200, garbage)
        if fault == "redirect" and not self.path.startswith("/moved/"):
            self.send_response(302)
            self.send_header("Location", "/moved" + self.path)
            self.end_headers()
            return None
        body = self._body(unquote(self.path.removeprefix("/moved")))
        if body is None:
            return self._send(404, b"not found")
        return self._ranged(body) if "Range" in self.headers else self._send(200, body)

    def _body(self, path: str) -> bytes | None:
        path, _, query = path.lstrip("/").partition("?")
        if path.endswith("/"):
            path += "index.json" if "json" in self.headers.get("Accept", "") else "index.html"
        file = self.server.root / (path + (f"@{query}" if query else ""))
        metadata = Path(str(file) + ".METADATA")
        if path.endswith(".whl") and metadata.is_file():
            return make_wheel(file.name, metadata.read_bytes())
        return file.read_bytes() if file.is_file() and self.server.root in file.resolve().parents else None

    def _ranged(self, body: bytes) -> None:
        spec = self.headers["Range"].removeprefix("bytes=")
        first, _, last = spec.partition("-")
        start = len(body) - int(last) if not first else int(first)
        end = len(body) - 1 if not first or not last else min(int(last), len(body) - 1)
        start = max(start, 0)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(body[start : end + 1])

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class SnapshotServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, faults: dict[str, str] | None = None, slow_s: float = 2.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root.resolve()
        self.faults = faults or {}
        self.slow_s = slow_s
        self.requests: list[str] = []

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (the timeout test) is expected, not news

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bases(self) -> dict[str, str]:
        """The index base URLs that point every index at this server."""
        return {index: f"{self.url}/{index}" for index in ("pypi", "pypi-files", "pytorch")}


@contextmanager
def serving(root: Path, faults: dict[str, str] | None = None, slow_s: float = 2.0) -> Iterator[SnapshotServer]:
    server = SnapshotServer(root, faults, slow_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
