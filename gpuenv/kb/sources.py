"""Where `kb refresh` reads upstream data: HTTP (httpx, timeouts, retries, redirects), a recorded snapshot
directory, or HTTP while recording into one.

Every request names an index and a path below that index's base URL, so a snapshot is laid out by index
(DIR/pypi/pypi/torch/json, DIR/pytorch/cu126/torch/index.html, ...) whatever mirror it was recorded from.
A wheel's METADATA is read by HTTP range requests (the zip's central directory, then the one member) and
recorded as the METADATA text itself (DIR/pypi-files/<wheel path>.METADATA).
"""

from __future__ import annotations

import io
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from gpuenv import __version__, files
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.extras import needed

DEFAULT_BASES: dict[str, str] = {
    "pypi": "https://pypi.org",
    "pypi-files": "https://files.pythonhosted.org",
    "pytorch": "https://download.pytorch.org/whl",
    "dockerhub": "https://hub.docker.com",
    "cuda-redist": "https://developer.download.nvidia.com/compute/cuda/redist",
    "nvidia-drivers": "https://docs.nvidia.com/datacenter/tesla/drivers",
}
INDEX_NAMES = {
    "pypi": "the Python package index",
    "pypi-files": "the Python package index's file host",
    "pytorch": "PyTorch's wheel index",
    "dockerhub": "Docker Hub's tag API",
    "cuda-redist": "NVIDIA's CUDA redist index",
    "nvidia-drivers": "NVIDIA's driver release list",
}
JSON = "application/json"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
HTML = "text/html"
_READ_AHEAD = 256 * 1024


def with_bases(**given_by_option: str | None) -> dict[str, str]:
    """The base URL of each index: the defaults, with the ones given instead (pypi_files= for pypi-files)."""
    given = {index.replace("_", "-"): url for index, url in given_by_option.items()}
    unknown = set(given) - set(DEFAULT_BASES)
    assert not unknown, f"no such index: {unknown}"
    return {**DEFAULT_BASES, **{index: url for index, url in given.items() if url}}


class IndexFailed(CannotRun):
    """An upstream index did not answer usably (down, timed out, not found, or garbage)."""


@dataclass(frozen=True)
class Request:
    index: str  # a key of DEFAULT_BASES
    path: str  # below the index's base URL, may carry a query
    accept: str = JSON
    optional: bool = False  # a 404 means "nothing there" (None) rather than a failure


class Fetcher(Protocol):
    def get(self, request: Request) -> bytes | None: ...

    def wheel_metadata(self, index: str, path: str) -> str: ...

    def url(self, index: str, path: str) -> str: ...


def snapshot_key(request: Request) -> str:
    """The file a request is recorded in, relative to the snapshot directory."""
    path, _, query = request.path.partition("?")
    if not path or path.endswith("/"):
        path += "index.html" if request.accept == HTML else "index.json"
    key = f"{request.index}/{path}" + (f"@{query}" if query else "")
    if ".." in key.split("/") or key.startswith("/"):
        raise IndexFailed(f"refusing a snapshot path outside the snapshot: {key}")
    return key


def split_url(url: str, page_url: str, bases: dict[str, str]) -> tuple[str, str]:
    """(index, path) of a URL found in an index page (absolute or relative to the page)."""
    absolute = urljoin(page_url, url).split("#", 1)[0]
    for known in (bases, DEFAULT_BASES):
        for index, base in known.items():
            if absolute.startswith(base.rstrip("/") + "/"):
                return index, absolute[len(base.rstrip("/")) + 1 :]
    raise IndexFailed(f"{page_url} links {absolute}, which lies outside every configured index")


@dataclass
class HttpFetcher:
    """The network, through httpx (imported on first use: the `kb` extra)."""

    bases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_BASES))
    timeout: float = 30.0
    retries: int = 2
    _client: Any = None

    def url(self, index: str, path: str) -> str:
        return self.bases[index].rstrip("/") + "/" + path

    def get(self, request: Request) -> bytes | None:
        response = self._send(request.index, request.path, {"Accept": request.accept}, request.optional)
        return None if response is None else bytes(response.content)

    def wheel_metadata(self, index: str, path: str) -> str:
        return read_wheel_metadata(_RangeFile(self, index, path), self.url(index, path))

    def read_range(self, index: str, path: str, start: int, end: int | None) -> tuple[bytes, int]:
        """Bytes start..end (inclusive; end None: to the end; start < 0: the last -start bytes) and the size."""
        spec = f"bytes={start}" if start < 0 else f"bytes={start}-{'' if end is None else end}"
        response = self._send(index, path, {"Range": spec}, False)
        assert response is not None
        total = response.headers.get("content-range", "").rpartition("/")[2]
        if response.status_code != 206 or not total.isdigit():
            raise IndexFailed(f"{self.url(index, path)} does not answer range requests (HTTP {response.status_code})")
        return bytes(response.content), int(total)

    def _send(self, index: str, path: str, headers: dict[str, str], optional: bool) -> Any:
        httpx = _httpx()
        url, name = self.url(index, path), INDEX_NAMES[index]
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2**attempt, 2.0))
            try:
                response = self._http().get(url, headers=headers)
            except httpx.TimeoutException:
                problem = f"timed out after {self.timeout:g} s"
                continue
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code == 404 and optional:
                return None
            if response.status_code in (429, 500, 502, 503, 504):
                problem = f"HTTP {response.status_code}"
                continue
            if response.status_code >= 400:
                raise IndexFailed(f"{name} answered HTTP {response.status_code} for {url}", hint=_HINT)
            return response
        tries = self.retries + 1
        raise IndexFailed(f"{name} did not answer {url}: {problem} ({tries} tries)", hint=_HINT)

    def _http(self) -> Any:
        if self._client is None:
            httpx = _httpx()
            self._client = httpx.Client(
                follow_redirects=True,
                timeout=httpx.Timeout(self.timeout),
                headers={"User-Agent": f"gpuenv/{__version__} (kb refresh)"},
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


_HINT = "check the network or the index's base URL option, or use --from DIR with a recorded snapshot"


def _httpx() -> Any:
    with needed("httpx", "kb refresh (reaching the indexes)"):
        import httpx  # optional extra (gpuenv[kb]): only kb refresh reaches the network
    return httpx


class _RangeFile(io.RawIOBase):
    """A seekable read-only view of a remote file, fetched by HTTP range requests as zipfile reads it."""

    def __init__(self, fetcher: HttpFetcher, index: str, path: str) -> None:
        super().__init__()
        self._fetcher, self._index, self._path = fetcher, index, path
        tail, self._size = fetcher.read_range(index, path, -_READ_AHEAD, None)
        self._chunks: list[tuple[int, bytes]] = [(self._size - len(tail), tail)]
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self._size if size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._cached(self._pos, end)
        if data is None:
            fetch_end = min(self._size, max(end, self._pos + _READ_AHEAD))
            chunk, _ = self._fetcher.read_range(self._index, self._path, self._pos, fetch_end - 1)
            self._chunks.append((self._pos, chunk))
            data = chunk[: end - self._pos]
        self._pos += len(data)
        return data

    def _cached(self, start: int, end: int) -> bytes | None:
        for offset, chunk in self._chunks:
            if offset <= start and end <= offset + len(chunk):
                return chunk[start - offset : end - offset]
        return None


def read_wheel_metadata(stream: io.RawIOBase, where: str) -> str:
    """The text of the wheel's *.dist-info/METADATA."""
    try:
        with zipfile.ZipFile(stream) as wheel:  # type: ignore[arg-type]
            names = [n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise IndexFailed(f"{where} is not a wheel: no single *.dist-info/METADATA")
            return wheel.read(names[0]).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError, EOFError) as exc:
        raise IndexFailed(f"{where} is not a readable wheel: {exc}") from exc


@dataclass
class SnapshotFetcher:
    """A recorded snapshot directory instead of the network (air-gapped sites, tests)."""

    root: Path
    bases: dict[str, str] = field(default_factory=dict)  # the mirrors it was recorded from: links to them resolve

    def url(self, index: str, path: str) -> str:
        return f"{self.root}/{index}/{path}"

    def get(self, request: Request) -> bytes | None:
        file = self.root / snapshot_key(request)
        if file.is_file():
            return files.read_bytes(file, "snapshot file", kind="snapshot", regular=True)
        if request.optional:
            return None
        raise IndexFailed(
            f"the snapshot {self.root} lacks {snapshot_key(request)}", hint="record one with --record DIR"
        )

    def wheel_metadata(self, index: str, path: str) -> str:
        return self.get(Request(index, path + ".METADATA")).decode("utf-8")  # type: ignore[union-attr]


@dataclass
class RecordingFetcher:
    """Another fetcher whose answers are also written to a snapshot directory."""

    inner: Fetcher
    root: Path

    @property
    def bases(self) -> dict[str, str]:
        return dict(getattr(self.inner, "bases", {}))

    def url(self, index: str, path: str) -> str:
        return self.inner.url(index, path)

    def get(self, request: Request) -> bytes | None:
        body = self.inner.get(request)
        if body is not None:
            self._write(snapshot_key(request), body)
        return body

    def wheel_metadata(self, index: str, path: str) -> str:
        text = self.inner.wheel_metadata(index, path)
        self._write(snapshot_key(Request(index, path + ".METADATA")), text.encode("utf-8"))
        return text

    def _write(self, key: str, body: bytes) -> None:
        file = self.root / key
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(body)


def check_base_url(value: str) -> str:
    """An index base URL given as an option: http(s), no query or fragment; returned without a trailing /."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise BadRequest(
            f"{value!r} is not an index base URL", hint="give http(s)://HOST[/PATH], e.g. https://pypi.org"
        )
    return value.rstrip("/")
