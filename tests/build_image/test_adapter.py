"""The Docker adapter's pure parts: reading the build stream, naming refs, reading a report.

The same code runs against a real daemon in test_docker.py; these cases pin down the parsing of
what dockerd 20.10's classic builder streams, including the shapes seen there."""

from __future__ import annotations

from collections import deque

import pytest

from gpuenv.adapters import docker as adapter
from gpuenv.errors import BadResult

STREAM = [
    {"stream": "Step 1/3 : FROM base:1\n"},
    {"stream": " ---> 1234abcd\n"},
    {"stream": "Step 2/3 : RUN echo hi\n"},
    {"stream": " ---> Using cache\n"},
    {"stream": " ---> 5678ef01\n"},
    {"stream": "Step 3/3 : RUN make\n"},
    {"stream": " ---> Running in 9abc\n"},
    {"stream": "compiling\nlinking\n"},
]


def _feed(chunks: list[dict[str, object]]) -> tuple[adapter.BuildResult, list[adapter.BuildEvent]]:
    result = adapter.BuildResult(image_id="", steps=0)
    events: list[adapter.BuildEvent] = []
    tail: deque[str] = deque(maxlen=adapter.TAIL_LINES)
    for chunk in chunks:
        adapter._take(chunk, result, tail, events.append)
    return result, events


def test_steps_cache_hits_and_the_image_id_are_read_from_the_stream() -> None:
    result, events = _feed([*STREAM, {"aux": {"ID": "sha256:" + "a" * 64}}, {"stream": "Successfully built aaaa\n"}])
    assert result.image_id == "sha256:" + "a" * 64
    assert result.steps == 3 and result.cached_steps == [2]
    assert result.instructions == {1: "FROM base:1", 2: "RUN echo hi", 3: "RUN make"}
    assert [(e.step, e.total, e.text) for e in events if e.kind == "step"] == [
        (1, 3, "FROM base:1"),
        (2, 3, "RUN echo hi"),
        (3, 3, "RUN make"),
    ]
    assert [e.text for e in events if e.kind == "output"][-3:] == ["compiling", "linking", "Successfully built aaaa"]


def test_an_error_names_the_step_and_shows_its_last_lines() -> None:
    error = {
        "error": "The command '/bin/sh -c make' returned a non-zero code: 2",
        "errorDetail": {"code": 2, "message": "The command '/bin/sh -c make' returned a non-zero code: 2"},
    }
    with pytest.raises(BadResult) as failed:
        _feed([*STREAM, error])
    message = failed.value.message
    assert message.startswith("build step 3 failed: RUN make\n")
    assert "  | compiling\n  | linking" in message and "non-zero code: 2" in message
    assert "1234abcd" not in message  # only the failing step's lines
    assert "-v" in (failed.value.hint or "")


def test_a_pull_failure_hints_at_a_mirror() -> None:
    with pytest.raises(BadResult) as failed:
        _feed([STREAM[0], {"error": "pull access denied for base, repository does not exist"}])
    assert "FROM base:1" in failed.value.message and "--base-image" in (failed.value.hint or "")


@pytest.mark.parametrize(
    "ref,expected",
    [
        ("team/torch:1", ("team/torch", ":", "1")),
        ("127.0.0.1:5000/team/torch:cu117", ("127.0.0.1:5000/team/torch", ":", "cu117")),
        ("127.0.0.1:5000/team/torch", ("127.0.0.1:5000/team/torch", "", "")),
        ("torch@sha256:" + "b" * 64, ("torch", "", "")),
    ],
)
def test_split_tag_keeps_the_registry_port(ref: str, expected: tuple[str, str, str]) -> None:
    assert adapter._split_tag(ref) == expected


def test_report_is_read_from_stdout_when_there_is_one() -> None:
    assert adapter._parse_report('{"verdict": {"certified": true}}\n') == {"verdict": {"certified": True}}
    assert adapter._parse_report('noise before\n{"a": 1}') == {"a": 1}
    assert adapter._parse_report("Usage: gpuenv verify\n") is None
    assert adapter._parse_report("[1, 2]") is None


def test_unknown_device_is_a_bad_request() -> None:
    from gpuenv.errors import BadRequest

    with pytest.raises(BadRequest):
        adapter.run_verify_in_image("x:1", level="quick", device="tpu", timeout=1, extra_args=[], on_note=pytest.fail)
