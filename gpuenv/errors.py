"""The errors gpuenv raises, each carrying its exit code (see docs/architecture.md).

The library never prints and never exits: it raises one of these, and the CLI turns it into
one line on stderr, a hint, and the exit code.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BAD_RESULT = 1
EXIT_BAD_REQUEST = 2
EXIT_CANNOT_RUN = 3


class GpuenvError(Exception):
    """Base class: a message, an optional hint, and the exit code it maps to."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadRequest(GpuenvError):
    """The user's input is invalid or impossible (exit 2)."""

    exit_code = EXIT_BAD_REQUEST


class BadResult(GpuenvError):
    """The thing checked is bad: a build step, a host or a check failed (exit 1)."""

    exit_code = EXIT_BAD_RESULT


class CannotRun(GpuenvError):
    """gpuenv's own tooling is missing or unreachable on this machine (exit 3)."""

    exit_code = EXIT_CANNOT_RUN


class Interrupted(CannotRun):
    """A signal (Ctrl-C, SIGTERM) stopped the command before it finished (exit 3)."""

    def __init__(self, message: str, *, hint: str | None = None, signame: str = "SIGINT") -> None:
        super().__init__(message, hint=hint)
        self.signame = signame  # the signal's name, for a run that says which one stopped it
