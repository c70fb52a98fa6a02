"""What each host runs for `fleet verify`, and what its answer means. Pure, no I/O.

One command per host, whichever fans it out (Ansible's one task, or one srun task per node):

    timeout --kill-after=15 LIMIT VENV/bin/gpuenv -q verify OPTIONS --report - [--inputs -]

coreutils' `timeout` holds the host's limit (SIGTERM, so verify still prints its partial report,
then SIGKILL); the report comes back on the command's standard output; a policy or baseline file
goes on its standard input (`verify --inputs -`). `judge` turns the exit status, the output and
what the fan-out said about the host into one of the OUTCOMES.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuenv.types import REPORT_OUTCOMES, Outcome, outcome_named

KILL_AFTER_S = 15  # after the SIGTERM at the host's limit, SIGKILL this much later
TIMED_OUT = (124, 137)  # coreutils timeout: SIGTERM sent (verify exited after it), or SIGKILL sent
NOT_FOUND = (126, 127)  # coreutils timeout: the command is not executable, or not there
REFUSED = 2  # gpuenv's bad request: the host's gpuenv refused what it was asked
STDERR_SHOWN = 300  # characters of the host's stderr a message keeps


def host_command(
    verify_args: list[str], *, venv: str, host_timeout_s: int, inputs: bool, launched: list[str] | None = None
) -> list[str]:
    """The argv each host runs; `launched` are the placement options a --multi-node host adds."""
    return [
        "timeout", f"--kill-after={KILL_AFTER_S}", str(host_timeout_s), f"{venv}/bin/gpuenv", "-q", "verify",
        *verify_args, *(launched or []), "--report", "-", *(["--inputs", "-"] if inputs else []),
    ]  # fmt: skip


@dataclass(frozen=True)
class Answer:
    """What came back from one host's command, as the fan-out saw it."""

    rc: int | None  # the command's exit status; None when it never ended on its own
    stdout: bytes = b""  # the report, if verify printed one
    stderr: str = ""
    unreachable: str | None = None  # the fan-out could not reach the host (why)
    timed_out: bool = False  # the fan-out stopped the command at its own limit
    failure: str | None = None  # the fan-out's word on a command that did not run to an exit


def judge(answer: Answer, verdict: tuple[str, str | None] | None, *, venv: str) -> tuple[Outcome, str]:
    """The host's outcome and why, from its answer and its report's (outcome, summary) if one came back."""
    said = _tail(answer.stderr)
    if answer.unreachable is not None:
        return "unreachable", answer.unreachable
    if answer.rc in NOT_FOUND:
        return "not provisioned", f"no gpuenv at {venv}/bin/gpuenv (run gpuenv provision)"
    if answer.timed_out or answer.rc in TIMED_OUT:
        return "timeout", _joined("verify ran past the host's limit", verdict[1] if verdict else None, said)
    reported = outcome_named(verdict[0]) if verdict else None
    if reported is not None and reported in REPORT_OUTCOMES:
        return reported, verdict[1] if verdict and verdict[1] else reported
    if answer.rc is None:
        return "could not run", answer.failure or said or "the command did not run to an exit"
    if answer.rc == REFUSED:
        return "could not run", _joined("the host's gpuenv refused the request (older than this one?)", said)
    if verdict is not None:
        return "could not run", _joined(f"its report was unreadable ({verdict[0]})", said)
    return "could not run", _joined(f"no report came back (exit {answer.rc})", said)


def _tail(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    return text if len(text) <= STDERR_SHOWN else "…" + text[-STDERR_SHOWN:]


def _joined(*parts: str | None) -> str:
    return ": ".join(p for p in parts if p)
