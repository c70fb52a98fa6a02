"""fleet verify --slurm without a cluster: the node list, which sinfo states srun can start a task
in, srun's arguments, and each node's answer taken from srun's labelled output."""

from __future__ import annotations

import json
from collections import deque

import pytest

from gpuenv.adapters.srun import StepOutput, split_label
from gpuenv.errors import BadRequest
from gpuenv.fleet import slurm_run
from gpuenv.fleet.onhost import Answer, judge
from gpuenv.fleet.request import FleetVerifyRequest
from gpuenv.output.jsontext import json_text
from gpuenv.slurm.scontrol import NodeRow, NodeState

USABLE = ["idle", "mixed", "completing", "planned", "mixed-"]
UNAVAILABLE = {
    "down": "Slurm has it down",
    "down*": "Slurm has it down* (not responding)",
    "idle*": "Slurm has it idle* (not responding)",
    "unknown*": "Slurm has it unknown* (not responding)",
    "drained": "Slurm has it drained",
    "draining": "Slurm has it draining",
    "allocated": "Slurm has it allocated, busy with other jobs",
    "idle~": "Slurm has it idle~",
    "idle#": "Slurm has it idle#",
    "idle%": "Slurm has it idle%",
    "idle$": "Slurm has it idle$",
    "idle@": "Slurm has it idle@",
    "maint": "Slurm has it maint",
    "reserved": "Slurm has it reserved",
    "fail": "Slurm has it fail",
    "inval": "Slurm has it inval",
    "future": "Slurm has it future",
    "unknown": "Slurm has it unknown",
}


@pytest.mark.parametrize("state", USABLE)
def test_srun_can_start_a_task_in_these_states(state: str) -> None:
    assert slurm_run.why_unavailable(state, None) is None


@pytest.mark.parametrize(("state", "said"), UNAVAILABLE.items())
def test_every_other_state_is_unreachable_in_slurms_words(state: str, said: str) -> None:
    assert slurm_run.why_unavailable(state, None) == said
    assert slurm_run.why_unavailable(state, "gpuenv: xid 79") == f"{said}: gpuenv: xid 79"


def rows(*specs: tuple[str, str, str]) -> list[NodeRow]:
    return [NodeRow(node, part, NodeState(state, None)) for node, part, state in specs]


def test_the_nodes_are_the_partitions_and_a_node_list_must_name_them() -> None:
    listed = rows(("a", "gpu*", "idle"), ("b", "gpu*", "down*"), ("c", "debug", "idle"), ("a", "debug", "idle"))
    assert slurm_run.pick_nodes(listed, None, None) == ("a", "b")  # the default partition's
    assert slurm_run.pick_nodes(rows(("c", "debug", "idle")), None, "debug") == ("c",)
    assert slurm_run.pick_nodes(listed, ("b", "a"), None) == ("b", "a")  # as asked, in order
    with pytest.raises(BadRequest, match="c not in the default partition"):
        slurm_run.pick_nodes(listed, ("a", "c"), None)
    with pytest.raises(BadRequest, match="no node in partition gpu"):
        slurm_run.pick_nodes([], None, "gpu")


def test_a_node_list_is_read_by_python_hostlist_in_order_never_by_a_shell() -> None:
    assert slurm_run.expand_nodelist("gpu[03,01-02],cpu7,gpu01") == ("gpu03", "gpu01", "gpu02", "cpu7")
    for bad, said in (("gpu[1-", "not a Slurm host list"), ("$(reboot)", "not one Slurm node name"), ("ALL", "every")):
        with pytest.raises(BadRequest, match=said):
            slurm_run.expand_nodelist(bad)


def test_srun_never_waits_for_a_node_and_never_kills_the_step_for_one() -> None:
    asked = FleetVerifyRequest(checks=("nvml",), passive=True, host_timeout_s=600, partition="gpu", venv="/v")
    args = slurm_run.srun_arguments(asked, tasks=3, job_name="gpuenv-fleet-verify-x", inputs=True)
    command = args[args.index("timeout") :]
    assert args[: args.index("timeout")] == [
        "--label", "--job-name=gpuenv-fleet-verify-x", "--distribution=arbitrary", "--ntasks=3",
        "--immediate=60", "--no-kill", "--kill-on-bad-exit=0", "--time=12", "--partition=gpu",
    ]  # fmt: skip
    assert command == [
        "timeout", "--kill-after=15", "600", "/v/bin/gpuenv", "-q", "verify", "--level", "quick", "--device", "auto",
        "--check", "nvml", "--passive", "--report", "-", "--inputs", "-",
    ]  # fmt: skip
    assert slurm_run.ranks_per_node(FleetVerifyRequest(multi_node=True, expect_gpus=8)) == 8
    assert slurm_run.ranks_per_node(FleetVerifyRequest(expect_gpus=8)) == 1


REPORT = {"schema": "gpuenv.verify-report/2", "verdict": {"outcome": "certified", "summary": "x" * 3000}}


def labelled(task: int, text: str, *, width: int = 1024) -> list[bytes]:
    """What srun --label prints for one task's output: each line, cut at srun's buffer."""
    out = []
    for line in text.splitlines():
        raw = line.encode()
        out += [f"{task:>2}: ".encode() + raw[i : i + width] for i in range(0, max(len(raw), 1), width)]
    return out


def step_of(stdout_lines: list[bytes], srun_said: list[str], **kw: object) -> StepOutput:
    step = StepOutput(rc=kw.pop("rc", 1), srun_said=deque(srun_said), **kw)  # type: ignore[arg-type]
    for line in stdout_lines:
        task, data = split_label(line)
        assert task is not None
        step.stdout.setdefault(task, bytearray()).extend(data)
    return step


def test_each_node_answers_by_its_task_and_srun_says_how_each_ended() -> None:
    printed = json_text(REPORT)
    layout = ["a", "b", "c", "d", "e", "e"]  # e: two ranks, the first prints the node's report
    lines = labelled(0, printed) + labelled(1, printed) + labelled(4, printed) + labelled(3, '{"schema": "gpu')
    said = [
        "srun: error: b: task 1: Exited with exit code 1",
        "srun: error: c: task 2: Exited with exit code 127",
        "srun: error: d: task 3: Killed",
        "srun: error: e: tasks 4-5: Exited with exit code 3",
        "srun: Force Terminated StepId=7.0",
    ]
    step = step_of(lines, said)
    step.stderr[3] = deque(["slurmstepd: error: *** STEP 7.0 ON d CANCELLED AT 2026-12-06 DUE TO TIME LIMIT ***"])
    answers = slurm_run.answers_of(step, layout)
    assert answers["a"].stdout == printed.encode() and answers["a"].rc == 0  # srun's cut lines joined again
    assert (answers["b"].rc, answers["c"].rc, answers["e"].rc) == (1, 127, 3)
    assert answers["d"].rc is None and answers["d"].timed_out and answers["d"].failure == "srun: task Killed"
    verdict = ("certified", "fine")
    outcomes = {node: judge(answer, verdict if answer.stdout.endswith(b"}\n") else None, venv="/v")[0]
                for node, answer in answers.items()}  # fmt: skip
    assert outcomes == {"a": "certified", "b": "certified", "c": "not provisioned", "d": "timeout", "e": "certified"}


def test_a_node_slurm_lost_is_unreachable_and_a_step_cut_at_the_runs_limit_times_out() -> None:
    step = step_of(labelled(0, json_text(REPORT)), ["srun: error: Node failure on b"])
    answers = slurm_run.answers_of(step, ["a", "b"])
    assert answers["b"] == Answer(None, unreachable="Node failure on b")
    cut = step_of(labelled(0, json_text(REPORT)) + labelled(1, '{"sche'), [], timed_out=True, rc=None)
    answers = slurm_run.answers_of(cut, ["a", "b", "c"])
    assert answers["a"].rc == 0 and not answers["a"].timed_out  # its whole report had come
    assert answers["b"].timed_out and answers["c"].timed_out


def test_srun_that_got_no_node_started_no_task() -> None:
    said = ["srun: Required node not available (down, drained or reserved)", "srun: error: Unable to allocate"]
    failed = slurm_run.allocation_failed(step_of([], said))
    assert failed == "Required node not available (down, drained or reserved); error: Unable to allocate"
    assert slurm_run.allocation_failed(step_of(labelled(0, "{}"), said)) is None
    assert slurm_run.allocation_failed(step_of([], [], rc=0)) is None


def test_srun_labels_are_taken_off_whatever_the_width() -> None:
    assert split_label(b'   12: {"a": 1}') == (12, b'{"a": 1}')
    assert split_label(b"0: ") == (0, b"")
    assert split_label(b"srun: error: x") == (None, b"srun: error: x")
    assert json.loads(b"".join(split_label(line)[1] for line in labelled(3, json_text(REPORT), width=7)))


def test_the_step_is_a_job_of_its_own_wherever_gpuenv_runs() -> None:
    inside = {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_CONF": "/etc/slurm/slurm.conf", "NCCL_DEBUG": "WARN"}
    assert slurm_run.own_job(inside) == {"SLURM_CONF": "/etc/slurm/slurm.conf", "NCCL_DEBUG": "WARN"}
