"""fleet verify without hosts: verify's arguments, each host's outcome, --retry-failed's reading,
the live progress, and bad requests that exit 2 before Ansible starts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuenv.ansible.events import HostSummary, Progress
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Host, Inventory
from gpuenv.errors import BadRequest
from gpuenv.fleet import run
from gpuenv.verify.options import SiteOptions
from tests.conftest import REPO, run_gpuenv


def test_verify_arguments_carry_every_verify_option() -> None:
    request = run.FleetVerifyRequest(
        level="standard",
        checks=("nvml", "stack"),
        device="cpu",
        expect_gpus=8,
        strict=True,
        check_timeout_s=45.0,
        image="registry.local/pt:2.4",
        baseline=Path("b.json"),
        policy=Path("p.json"),
    )
    assert run.verify_arguments(request) == [
        *("--level", "standard", "--device", "cpu", "--check", "nvml", "--check", "stack"),
        *("--expect-gpus", "8", "--strict", "--timeout", "45", "--image", "registry.local/pt:2.4"),
        *("--baseline", "baseline.json", "--policy", "policy.json"),
    ]
    text = run.render_variables(request, reports_dir=Path("/r"), files={"baseline": Path("/b"), "policy": Path("/p")})
    data = json.loads(text.split("\n", 1)[1])
    assert data["fleet_files"] == [{"src": "/b", "name": "baseline.json"}, {"src": "/p", "name": "policy.json"}]
    assert data["fleet_host_timeout"] == 1800 and data["fleet_reports_dir"] == "/r"


def test_site_checks_are_named_to_each_hosts_verify_never_copied(tmp_path: Path) -> None:
    site = SiteOptions(checks_dir="/etc/gpuenv/checks.d", plugins=("scratch", "ib"), all_plugins=False)
    request = run.FleetVerifyRequest(checks=("site.ib",), site=site)
    assert run.verify_arguments(request) == [
        *("--level", "quick", "--device", "auto", "--check", "site.ib"),
        *("--checks-dir", "/etc/gpuenv/checks.d", "--plugin", "scratch", "--plugin", "ib"),
    ]
    text = run.render_variables(request, reports_dir=Path("/r"), files={})
    assert json.loads(text.split("\n", 1)[1])["fleet_files"] == []
    out = run_gpuenv("fleet", "verify", "gpu01", "--checks-dir", "checks.d", "--no-history", cwd=tmp_path)
    assert out.returncode == 2 and "--checks-dir must be an absolute path" in out.stderr, out.stderr


def test_the_playbook_knows_the_names_the_service_reads() -> None:
    play = (REPO / "playbooks" / run.PLAYBOOK).read_text()
    assert f"name: {run.FleetBoard.LAST_TASK}" in play
    for said in ("not provisioned: ", "'timeout'", "'not certified'", "'could not run'", "(run gpuenv provision)"):
        assert said in play
    assert "{{ inventory_hostname }}.json" in play


def summary(**kw: object) -> HostSummary:
    return HostSummary("h", **kw)  # type: ignore[arg-type]


NOT_CERTIFIED = ("not certified", "not certified (CPU only): nvml (1 fail)")


@pytest.mark.parametrize(
    ("host", "verdict", "status", "expected", "why"),
    [
        (summary(ok=9), ("certified", "certified (1 pass)"), "successful", "certified", "certified (1 pass)"),
        (summary(failed=1, message="Judge the host: not certified: "), NOT_CERTIFIED, "failed", *NOT_CERTIFIED),
        (summary(failed=1, message="Judge the host: could not run: x"), ("could not run", None), "failed", None, None),
        (summary(failed=1, message="Require gpuenv on the host: not provisioned: no gpuenv"), None, "failed", None, 0),
        (summary(failed=1, message="Judge the host: timeout: "), ("interrupted", None), "failed", "timeout", 0),
        (
            summary(unreachable=1, message="Find gpuenv on the host: Failed to connect"),
            None,
            "failed",
            "unreachable",
            0,
        ),
        (summary(ok=9), None, "successful", "could not run", "no report came back"),  # ok, yet no report came
        (summary(failed=1, message="Make the work directory: disk full"), None, "failed", "could not run", 0),
        (None, None, "timeout", "timeout", None),
        (None, None, "failed", "could not run", None),
    ],
)
def test_each_host_gets_one_outcome_and_why(
    host: HostSummary | None, verdict: tuple[str, str | None] | None, status: str, expected: str | None, why: object
) -> None:
    """expected None: the outcome the play's failure message names; why 0: that message itself."""
    said = host.message.split(": ", 1)[-1] if host is not None and host.message else None
    outcome, message = run.host_outcome(host, verdict, run_status=status)
    assert outcome == (expected or (said or "").split(":")[0])
    assert message == (said if why == 0 else why)
    assert outcome in run.OUTCOMES


def test_targets_follow_the_limit_by_host_and_group() -> None:
    inventory = Inventory((Host("a"), Host("b"), Host("c")), {"rack1": ("b", "c")})
    assert inventory.targets(None) == ("a", "b", "c")
    assert inventory.targets("a,rack1") == ("a", "b", "c")
    assert inventory.targets("rack1") == ("b", "c")


def test_retry_reads_the_hosts_that_were_not_certified() -> None:
    doc = {"schema": run.SCHEMA, "hosts": [{"host": "a", "outcome": "certified"}, {"host": "b", "outcome": "timeout"}]}
    assert run.failed_hosts(json.dumps(doc), "x") == ("b",)
    for bad in ("{", "[]", json.dumps({"schema": "gpuenv.provision/1", "hosts": []})):
        with pytest.raises(BadRequest, match="not a fleet verify summary"):
            run.failed_hosts(bad, "x")


def test_reports_go_to_a_folder_named_by_the_utc_start() -> None:
    moment = datetime(2026, 11, 30, 16, 4, 5, tzinfo=timezone.utc)
    assert run.timestamp(moment) == "20261130T160405Z"


def test_progress_counts_hosts_done_and_failing() -> None:
    board = run.FleetBoard(total=3)
    assert board.add(Progress("a", "Run gpuenv verify", "ok")) is None
    assert board.add(Progress("a", board.LAST_TASK, "skipped")) == "[1/3 done, 0 failing] a: ok"
    assert board.add(Progress("b", "Find gpuenv on the host", "unreachable")) == "[2/3 done, 1 failing] b: unreachable"
    line = board.add(Progress("c", board.LAST_TASK, "failed"))
    assert line == "[3/3 done, 2 failing] c: failed at 'Judge the host'"
    assert board.add(Progress("c", "Remove the work directory", "ok")) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("gpu01;reboot",), "invalid host"),
        (("gpu01", "--venv", "/opt/$(id)"), "--venv"),
        (("gpu01", "--limit", "a;b"), "--limit"),
        (("gpu01", "--policy", "/nonexistent/policy.json"), "--policy"),
        (("gpu01", "--retry-failed", "."), "fleet-verify.json"),
        (("gpu01", "--check-timeout", "nan"), "--check-timeout"),
        (("gpu01", "--become-password-file", "pw.txt"), "--become-password-file"),
        (("-i", "hosts.ini", "gpu01"), "not both"),
    ],
)
def test_bad_requests_exit_2_before_anything_runs(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "pw.txt").write_text("secret\n")
    (tmp_path / "pw.txt").chmod(0o644)  # others may read it: refused
    (tmp_path / "hosts.ini").write_text("gpu01\n")
    db = tmp_path / "h.sqlite"
    result = run_gpuenv("fleet", "verify", *args, "--history", str(db), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("gpuenv: error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "reports").exists()


def test_retry_of_a_run_where_every_host_was_certified_runs_nothing(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    doc = {"schema": run.SCHEMA, "hosts": [{"host": "gpu01", "outcome": "certified"}]}
    (earlier / run.SUMMARY_FILE).write_text(json.dumps(doc))
    request = run.FleetVerifyRequest(
        hosts=Hosts(names=("gpu01",)), retry_failed=earlier, reports_dir=tmp_path / "again"
    )
    plan = run.prepare(request, prompt=lambda _: pytest.fail("no password was asked for"))
    result = run.run(plan, on_progress=lambda _: None)
    assert (result.status, result.hosts, result.exit_code) == ("nothing to retry", (), 0)
    assert not (tmp_path / "again").exists()


def test_fleet_report_of_a_fleet_verify_folder_counts_the_hosts_without_a_report(tmp_path: Path) -> None:
    from tests.fleet.test_history import gpu, raw, report

    doc = report("gpu01", "2026-11-30T09:00:00Z", [gpu(0, "GPU-a", "S-a")])
    (tmp_path / "gpu01.json").write_bytes(raw(doc))
    rows = [
        {"host": "gpu01", "outcome": "certified", "report": str(tmp_path / "gpu01.json"), "message": None},
        {"host": "gpu02", "outcome": "unreachable", "report": None, "message": "Failed to connect"},
    ]
    (tmp_path / run.SUMMARY_FILE).write_text(json.dumps({"schema": run.SCHEMA, "hosts": rows}))
    result = run_gpuenv("fleet", "report", str(tmp_path), "--no-history", "--json")
    assert result.returncode == 1 and "skipped" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert {h["host"]: h["outcome"] for h in doc["hosts"]} == {"gpu01": "certified", "gpu02": "unreachable"}
