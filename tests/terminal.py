"""Run the real CLI in a pseudo-terminal, as a user at a terminal would: Rich decides colour and live
display by isatty, so what a terminal shows is tested in one."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Screenful:
    code: int
    raw: str  # everything the terminal received, escape sequences included
    chunks: tuple[tuple[float, str], ...]  # (seconds since start, text) as it arrived

    @property
    def text(self) -> str:
        """What was written, escape sequences removed, carriage returns as line ends."""
        return ANSI.sub("", self.raw).replace("\r\n", "\n").replace("\r", "\n")

    def first_seen(self, needle: str) -> float:
        """Seconds after start when `needle` had arrived (escape sequences removed)."""
        seen = ""
        for at, chunk in self.chunks:
            seen += chunk
            if needle in ANSI.sub("", seen):
                return at
        raise AssertionError(f"{needle!r} never appeared in:\n{self.text}")


def in_terminal(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Screenful:
    """Run `python -m gpuenv ARGS` with stdout and stderr on a pseudo-terminal (100 columns)."""
    main, child = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm-256color", **(env or {})},
        close_fds=True,
    )
    os.close(child)
    chunks: list[tuple[float, str]] = []
    try:
        while time.monotonic() - started < timeout:
            ready, _, _ = select.select([main], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append((time.monotonic() - started, data.decode(errors="replace")))
        code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    return Screenful(code, "".join(text for _, text in chunks), tuple(chunks))
