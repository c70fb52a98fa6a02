"""Property-based: mutated verify reports, GPU histories and power state files fed to `fleet report`,
`fleet history` and `tune power --restore` through the CLI's main. Whatever the bytes: no traceback
and no crash (exit 3 "gpuenv crashed"), no hang, a host whose own file does not certify it is never
counted healthy, and no file but the named outputs changes. Bounded (max_examples, a deadline per
example) so the suite stays fast."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuenv.errors import CannotRun
from gpuenv.power import service
from gpuenv.verify import reportfile
from tests.conftest import gpuenv_main
from tests.fleet import fleet_reports as fr

FUZZ = settings(
    max_examples=60,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run: a failure reproduces
)

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["certified", "pass", "fail", "GPU-x\x1b[2J", "2099-01-01T00:00:00+00:00", "NaN"]),
    st.just([]),
    st.just({}),
    st.just([[[[[[[[[[1]]]]]]]]]]),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document (keys and list positions)."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):
            yield from _paths(value, (*prefix, i))


def _mutated(doc: Any, where: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not where:
        return value
    head, *rest = where
    copy: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    if not rest and delete:
        del copy[head]
    else:
        copy[head] = _mutated(doc[head], tuple(rest), value, delete)
    return copy


def _base_reports() -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    nodes = fr.fleet(2, gpus=2, prefix="victim")  # host names of their own: no report of another host wins
    fr.ecc_failure(nodes[1], 1)
    docs = [fr.report(n) for n in nodes]
    return docs, list(_paths(docs[0]))


DOCS, PLACES = _base_reports()
GOOD = [fr.report(n) for n in fr.fleet(2, gpus=2, prefix="good")]


@st.composite
def report_bytes(draw: Any) -> bytes:
    """A verify report (certified or failing) changed in one place, or its bytes cut or flipped."""
    doc = DOCS[draw(st.integers(0, len(DOCS) - 1))]
    how = draw(st.sampled_from(["value", "delete", "cut", "flip"]))
    if how in ("value", "delete"):
        where = draw(st.sampled_from(PLACES))
        delete = how == "delete" and bool(where)
        text = json.dumps(_mutated(doc, where, draw(ODD_VALUES), delete), allow_nan=True)
        return text.encode()
    raw = json.dumps(doc).encode()
    at = draw(st.integers(0, len(raw) - 1))
    return raw[:at] if how == "cut" else raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@contextmanager
def _folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuenv-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _no_crash(code: int, err: str) -> None:
    assert "Traceback" not in err and "crashed" not in err, err
    assert code in (0, 1, 2), (code, err)


def _certifies(raw: bytes) -> bool:
    """Whether the file, read as every reader reads it, is a report that certifies its host."""
    try:
        document = reportfile.decode(raw)
    except reportfile.UnreadableReport:
        return False
    verdict = getattr(document, "verdict", None)
    return verdict is not None and verdict.outcome == "certified"


@FUZZ
@given(victim=report_bytes())
def test_fleet_report_never_calls_a_bad_host_healthy(capsys: pytest.CaptureFixture[str], victim: bytes) -> None:
    with _folder() as root:
        reports = root / "reports"
        reports.mkdir()
        for i, doc in enumerate(GOOD):
            (reports / f"good{i}.json").write_text(json.dumps(doc))
        (reports / "victim.json").write_bytes(victim)
        before = _files(reports)
        args = ["fleet", "report", "--json", "--history", str(root / "h.sqlite"), "--prometheus", str(root / "f.prom")]
        code = gpuenv_main(*args, str(reports))
        out = capsys.readouterr()
        _no_crash(code, out.err)
        assert _files(reports) == before  # only the named outputs were written
        if code == 0:  # a file that does not say it is a gpuenv report is named and skipped
            lost = reportfile.claims_report(victim) and not _certifies(victim)
            assert not lost, "a host whose file does not certify it was counted healthy"
            data = json.loads(out.out)  # two hosts: healthy or, where a group went unjudged, not judged
            assert data["healthy"] in (True, None) and (data["healthy"] is True) == data["judged"]


@pytest.fixture(scope="module")
def history_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = fr.write(fr.fleet(3, gpus=2), tmp_path_factory.mktemp("fleet"))
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    with pytest.raises(SystemExit):
        from gpuenv.cli import main

        main(["fleet", "report", "--history", str(path), str(folder)])
    return path


@FUZZ
@given(
    offset=st.integers(0, 1 << 16),
    change=st.binary(min_size=1, max_size=16),
    key=st.sampled_from(["GPU-gpu0000-0", "gpu0001", "none"]),
)
def test_fleet_history_reads_a_damaged_file_without_crashing(
    capsys: pytest.CaptureFixture[str], history_file: Path, offset: int, change: bytes, key: str
) -> None:
    with _folder() as root:
        raw = bytearray(history_file.read_bytes())
        at = offset % len(raw)
        raw[at : at + len(change)] = change
        path = root / "history.sqlite"
        path.write_bytes(bytes(raw))
        code = gpuenv_main("fleet", "history", key, "--history", str(path), "--json")
        _no_crash(code, capsys.readouterr().err)


STATE: dict[str, Any] = {
    "schema": "gpuenv.power-state/1",
    "phase": "applied",
    "pid": 1,
    "started": "2026-11-30T20:00:00+00:00",
    "gpus": [{"index": 0, "uuid": "GPU-0", "original_mw": 700000, "applied_mw": 450000}],
}
STATE_PLACES = list(_paths(STATE))


@FUZZ
@given(where=st.sampled_from(STATE_PLACES), value=ODD_VALUES, delete=st.booleans())
def test_tune_power_restore_refuses_a_damaged_state_cleanly(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: tuple[Any, ...],
    value: Any,
    delete: bool,
) -> None:
    def no_nvml() -> Any:
        raise CannotRun("no NVML here (the fuzz test stops before any limit is set)")

    monkeypatch.setattr(service, "_control", no_nvml)
    with _folder() as root:
        path = root / "power-state.json"
        path.write_text(json.dumps(_mutated(STATE, where, value, delete and bool(where)), allow_nan=True))
        path.chmod(0o600)
        before = _files(root)
        code = gpuenv_main("tune", "power", "--restore", "--state-file", str(path))
        err = capsys.readouterr().err
        assert "Traceback" not in err and "crashed" not in err, err
        assert code in (0, 2, 3), (code, err)
        assert _files(root) in (before, {}), "only the state file itself may change (removed once restored)"
