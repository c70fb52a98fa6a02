"""fleet verify without hosts: verify's arguments, each host's outcome, --retry-failed's reading,
the live progress, and bad requests that exit 2 before Ansible starts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuenv.ansible.events import Progress
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Host, Inventory
from gpuenv.errors import BadRequest
from gpuenv.fleet import collect, request, run
from gpuenv.fleet.onhost import Answer, judge
from gpuenv.verify import inputs
from gpuenv.verify.options import SiteOptions
from tests.conftest import REPO, run_gpuenv


def test_verify_arguments_carry_every_verify_option() -> None:
    asked = request.FleetVerifyRequest(
        level="standard",
        checks=("nvml", "stack"),
        device="cpu",
        expect_gpus=8,
        strict=True,
        check_timeout_s=45.0,
        image="registry.local/pt:2.4",
        host_timeout_s=600,
    )
    assert request.verify_arguments(asked) == [
        *("--level", "standard", "--device", "cpu", "--check", "nvml", "--check", "stack"),
        *("--expect-gpus", "8", "--strict", "--timeout", "45", "--image", "registry.local/pt:2.4"),
    ]
    document = inputs.pack({"policy": "{}"})
    data = json.loads(run.render_variables(asked, inputs=document).split("\n", 1)[1])
    assert data["fleet_argv"] == [
        "timeout", "--kill-after=15", "600", "/opt/gpuenv/venv/bin/gpuenv", "-q", "verify",
        *request.verify_arguments(asked), "--report", "-", "--inputs", "-",
    ]  # fmt: skip
    assert data["fleet_inputs"] == document and data["fleet_argv_by_host"] is None
    assert data["fleet_task_timeout"] == 660
    plain = json.loads(run.render_variables(asked, inputs=None).split("\n", 1)[1])
    assert plain["fleet_argv"][-2:] == ["--report", "-"] and plain["fleet_inputs"] is None


def test_site_checks_are_named_to_each_hosts_verify_never_copied(tmp_path: Path) -> None:
    site = SiteOptions(checks_dir="/etc/gpuenv/checks.d", plugins=("scratch", "ib"), all_plugins=False)
    asked = request.FleetVerifyRequest(checks=("site.ib",), site=site)
    assert request.verify_arguments(asked) == [
        *("--level", "quick", "--device", "auto", "--check", "site.ib"),
        *("--checks-dir", "/etc/gpuenv/checks.d", "--plugin", "scratch", "--plugin", "ib"),
    ]
    assert json.loads(run.render_variables(asked, inputs=None).split("\n", 1)[1])["fleet_inputs"] is None
    out = run_gpuenv("fleet", "verify", "gpu01", "--checks-dir", "checks.d", "--no-history", cwd=tmp_path)
    assert out.returncode == 2 and "--checks-dir must be an absolute path" in out.stderr, out.stderr


def test_the_input_files_travel_as_one_document_checked_before_any_host(tmp_path: Path) -> None:
    policy, baseline = tmp_path / "policy.json", tmp_path / "baseline.json"
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"gpu_missing": {"severity": "warn"}}}))
    baseline.write_text((REPO / "gpuenv" / "data" / "baselines.json").read_text())
    document = request.inputs_document(request.FleetVerifyRequest(policy=policy, baseline=baseline))
    assert document is not None
    assert inputs.unpack(document.encode(), "-") == {"policy": policy.read_text(), "baseline": baseline.read_text()}
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"no_such_rule": {}}}))
    with pytest.raises(BadRequest, match="unknown rule"):
        request.inputs_document(request.FleetVerifyRequest(policy=policy))
    assert request.inputs_document(request.FleetVerifyRequest()) is None


def test_the_playbook_runs_one_task_with_the_variables_gpuenv_writes() -> None:
    play = (REPO / "playbooks" / run.PLAYBOOK).read_text()
    assert play.count("- name: ") == 2 and f"- name: {run.TASK}\n" in play  # the play, its one task
    for variable in ("fleet_argv_by_host[inventory_hostname]", "fleet_argv", "fleet_inputs", "fleet_task_timeout"):
        assert variable in play
    assert "failed_when: false" in play  # judged here: a failed task would print the whole report
    variables = json.loads(run.render_variables(request.FleetVerifyRequest(), inputs=None).split("\n", 1)[1])
    assert set(variables) == {"fleet_argv", "fleet_argv_by_host", "fleet_inputs", "fleet_task_timeout", "fleet_env"}


VENV = "/opt/gpuenv/venv"
REPORTED = ("not certified", "not certified (CPU only): nvml (1 fail)")


@pytest.mark.parametrize(
    ("answer", "verdict", "expected", "why"),
    [
        (Answer(0), ("certified", "certified (1 pass)"), "certified", "certified (1 pass)"),
        (Answer(1), REPORTED, *REPORTED),
        (Answer(3, stderr="no GPU"), ("could not run", "no check could run"), "could not run", "no check could run"),
        (Answer(127, stderr="timeout: failed to run command"), None, "not provisioned", "no gpuenv at"),
        (Answer(126), None, "not provisioned", "(run gpuenv provision)"),
        (Answer(124, stderr="interrupted"), ("interrupted", "stopped"), "timeout", "verify ran past the host's limit"),
        (Answer(137), None, "timeout", "verify ran past the host's limit"),
        (Answer(None, timed_out=True, failure="expected time frame"), None, "timeout", "ran past"),
        (Answer(None, unreachable="Failed to connect"), None, "unreachable", "Failed to connect"),
        (Answer(0), None, "could not run", "no report came back (exit 0)"),
        (Answer(1, stderr="a\nb\nTraceback"), None, "could not run", "no report came back (exit 1): a | b | Traceback"),
        (Answer(2, stderr="No such option: --inputs"), None, "could not run", "refused the request"),
        (Answer(1), ("unreadable report", None), "could not run", "its report was unreadable"),
        (Answer(None, failure="MODULE FAILURE"), None, "could not run", "MODULE FAILURE"),
    ],
)
def test_each_host_gets_one_outcome_and_why(
    answer: Answer, verdict: tuple[str, str | None] | None, expected: str, why: str
) -> None:
    outcome, message = judge(answer, verdict, venv=VENV)
    assert (outcome, why in message) == (expected, True), message
    assert outcome in collect.OUTCOMES


def test_a_hosts_answer_is_the_result_of_the_plays_task() -> None:
    ok = Progress("h1", run.TASK, "ok", {"rc": 1, "stdout": "{}", "stderr": "bad", "msg": ""})
    assert run.answer_of(ok) == Answer(1, stdout=b"{}", stderr="bad")
    gone = Progress("h2", run.TASK, "unreachable", {"msg": "Failed to connect to the host via ssh"})
    assert run.answer_of(gone) == Answer(None, unreachable="Failed to connect to the host via ssh")
    said = "The command action failed to execute in the expected time frame (90) and was terminated"
    late = Progress("h3", run.TASK, "failed", {"msg": said})
    assert run.answer_of(late) == Answer(None, timed_out=True, failure=said)
    assert run.answer_of(Progress("h1", run.TASK, "started")) is None
    assert run.answer_of(Progress("h1", "Gathering Facts", "ok", {})) is None


def test_targets_follow_the_limit_by_host_and_group() -> None:
    inventory = Inventory((Host("a"), Host("b"), Host("c")), {"rack1": ("b", "c")})
    assert inventory.targets(None) == ("a", "b", "c")
    assert inventory.targets("a,rack1") == ("a", "b", "c")
    assert inventory.targets("rack1") == ("b", "c")


def test_retry_reads_the_hosts_that_were_not_certified() -> None:
    rows = [{"host": "a", "outcome": "certified"}, {"host": "b", "outcome": "timeout"}]
    doc = {"schema": collect.SCHEMA, "hosts": rows}
    assert request.failed_hosts(json.dumps(doc), "x") == ("b",)
    for bad in ("{", "[]", json.dumps({"schema": "gpuenv.provision/1", "hosts": []})):
        with pytest.raises(BadRequest, match="not a fleet verify summary"):
            request.failed_hosts(bad, "x")


def test_reports_go_to_a_folder_named_by_the_utc_start() -> None:
    moment = datetime(2026, 11, 30, 16, 4, 5, tzinfo=timezone.utc)
    assert request.timestamp(moment) == "20261130T160405Z"


def test_progress_counts_hosts_done_and_failing() -> None:
    board = collect.FleetBoard(total=3)
    assert board.add(collect.HostOutcome("a", "certified", None, None)) == "[1/3 done, 0 failing] a: certified"
    line = board.add(collect.HostOutcome("b", "unreachable", None, "Failed to connect"))
    assert line == "[2/3 done, 1 failing] b: unreachable"
    line = board.add(collect.HostOutcome("c", "not provisioned", None, None))
    assert line == "[3/3 done, 2 failing] c: not provisioned"


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
        (("gpu01", "--policy", "bad-policy.json"), "NVML policy"),
        (("gpu01", "--nodelist", "gpu01"), "--nodelist goes with --slurm"),
        (("--slurm", "gpu01"), "HOSTS is an option of the Ansible fan-out"),
        (("--slurm", "--limit", "gpu01"), "--limit is an option of the Ansible fan-out"),
        (("--slurm", "--nodelist", "gpu[01-"), "not a Slurm host list"),
        (("--slurm", "--nodelist", "gpu01,all"), "Slurm's name for every node"),
        (("--slurm", "--nodelist", "a[1-60000],b[1-60000]"), "names 120000 nodes"),
        (("--slurm", "--partition", "gpu a"), "not one Slurm partition name"),
        (("--slurm", "--retry-failed", ".", "--nodelist", "a"), "exclude each other"),
    ],
)
def test_bad_requests_exit_2_before_anything_runs(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "pw.txt").write_text("secret\n")
    (tmp_path / "pw.txt").chmod(0o644)  # others may read it: refused
    (tmp_path / "hosts.ini").write_text("gpu01\n")
    (tmp_path / "bad-policy.json").write_text('{"schema": "gpuenv.nvml-policy/0"}')
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
    doc = {"schema": collect.SCHEMA, "hosts": [{"host": "gpu01", "outcome": "certified"}]}
    (earlier / collect.SUMMARY_FILE).write_text(json.dumps(doc))
    asked = request.FleetVerifyRequest(
        hosts=Hosts(names=("gpu01",)), retry_failed=earlier, reports_dir=tmp_path / "again"
    )
    plan = run.prepare(asked, prompt=lambda _: pytest.fail("no password was asked for"))
    result = run.run(plan, on_host=lambda _: None)
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
    (tmp_path / collect.SUMMARY_FILE).write_text(json.dumps({"schema": collect.SCHEMA, "hosts": rows}))
    result = run_gpuenv("fleet", "report", str(tmp_path), "--no-history", "--json")
    assert result.returncode == 1 and "skipped" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert {h["host"]: h["outcome"] for h in doc["hosts"]} == {"gpu01": "certified", "gpu02": "unreachable"}
