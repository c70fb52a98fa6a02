"""What `fleet verify` was asked, and the checks both of its fan-outs (Ansible, Slurm) make before
anything runs: verify's options for each host, the input files, the reports folder, the history,
the hosts an earlier run did not certify (`--retry-failed`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gpuenv import validate
from gpuenv.ansible.hosts import Hosts
from gpuenv.errors import BadRequest
from gpuenv.files import read_text
from gpuenv.fleet.history import connect
from gpuenv.types import DeviceChoice, Level
from gpuenv.verify import inputs
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.options import SiteOptions
from gpuenv.verify.reportfile import FLEET_VERIFY_SCHEMA as SCHEMA

SUMMARY_FILE = "fleet-verify.json"


@dataclass(frozen=True)
class FleetVerifyRequest:
    """What fleet verify was asked, as given on the command line (paths not yet checked)."""

    hosts: Hosts = field(default_factory=Hosts)
    level: Level = "quick"
    checks: tuple[str, ...] = ()
    device: DeviceChoice = "auto"
    expect_gpus: int | None = None
    strict: bool = False
    passive: bool = False  # verify --passive on each host (with --check nvml): NVML read without load
    baseline: Path | None = None
    policy: Path | None = None
    image: str | None = None
    timeout_s: int = 2 * 3600
    host_timeout_s: int = 1800
    check_timeout_s: float | None = None
    venv: str = "/opt/gpuenv/venv"
    reports_dir: Path | None = None  # default: reports/<UTC start, 20261130T150405Z>
    retry_failed: Path | None = None
    history: Path | None = None  # None: record nothing
    artifacts_dir: Path | None = None
    multi_node: bool = False  # one collective across every host (verify --nnodes/--node-rank/--master-addr)
    site: SiteOptions = field(default_factory=SiteOptions)  # the site checks installed on the hosts, by name
    master_port: int = 29500  # where the first host's rendezvous store listens, with --multi-node
    slurm: bool = False  # fan out through srun instead of Ansible
    nodelist: str | None = None  # with slurm: the nodes (a Slurm host list); None: the partition's
    partition: str | None = None  # with slurm: the partition srun runs in; None: the default one


def verify_arguments(request: FleetVerifyRequest) -> list[str]:
    """The arguments after `gpuenv verify` on each host (the input files come with --inputs)."""
    args = ["--level", request.level, "--device", request.device]
    for check in ("allreduce",) if request.multi_node else request.checks:
        args += ["--check", check]
    if request.expect_gpus is not None:
        args += ["--expect-gpus", str(request.expect_gpus)]
    if request.strict:
        args.append("--strict")
    if request.passive:
        args.append("--passive")
    if request.check_timeout_s is not None:
        args += ["--timeout", f"{request.check_timeout_s:g}"]
    if request.image is not None:
        args += ["--image", request.image]
    return args + request.site.arguments()  # named as the hosts have them (provision put them there): never copied


def inputs_document(request: FleetVerifyRequest) -> str | None:
    """--policy and --baseline, checked here before any host runs, as the document verify --inputs reads."""
    texts = {}
    for name, load in (("policy", load_policy), ("baseline", load_baselines)):
        given = getattr(request, name)
        if given is not None:
            path = validate.existing_file(validate.safe_path(str(given), f"--{name}"), f"--{name}").resolve()
            load(path)  # a bad file is a bad request here, not one on every host
            texts[name] = read_text(path, f"--{name}")
    return inputs.pack(texts) if texts else None


def reports_folder(request: FleetVerifyRequest, now: datetime | None = None) -> Path:
    """Where the reports land (checked, not made yet)."""
    folder = request.reports_dir or Path("reports") / timestamp(now or datetime.now(timezone.utc))
    folder = Path(validate.safe_path(str(folder), "--reports-dir")).resolve()
    if folder.exists() and not folder.is_dir():
        raise BadRequest(f"--reports-dir {folder} is not a folder", hint="give a folder (made if missing)")
    return folder


def check_history(request: FleetVerifyRequest) -> None:
    if request.history is not None:
        with connect(request.history):  # made (or found readable) before any host is touched
            pass


def timestamp(moment: datetime) -> str:
    """The name of a run's reports folder: 20261130T150405Z."""
    return moment.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def retried_hosts(request: FleetVerifyRequest) -> tuple[str, ...] | None:
    """With --retry-failed DIR: the hosts DIR's summary did not certify (None without the option)."""
    if request.retry_failed is None:
        return None
    folder = validate.existing_dir(validate.safe_path(str(request.retry_failed), "--retry-failed"), "--retry-failed")
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        raise BadRequest(f"--retry-failed: no {SUMMARY_FILE} in {folder}", hint=RETRY_HINT)
    return failed_hosts(read_text(summary, "fleet verify summary"), str(summary))


def failed_hosts(summary_text: str, source: str) -> tuple[str, ...]:
    """The hosts of an earlier run's summary whose outcome was not certified."""
    try:
        doc = json.loads(summary_text)
        rows = doc["hosts"] if doc.get("schema") == SCHEMA else None
        failed = tuple(str(r["host"]) for r in rows or [] if r["outcome"] != "certified")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadRequest(f"--retry-failed: {source} is not a fleet verify summary", hint=RETRY_HINT) from exc
    if rows is None:
        raise BadRequest(f"--retry-failed: {source} is not a fleet verify summary", hint=RETRY_HINT)
    return failed


RETRY_HINT = f"give a folder an earlier gpuenv fleet verify wrote its reports and {SUMMARY_FILE} to"


def check_multi_node(request: FleetVerifyRequest, hosts: tuple[str, ...]) -> None:
    """Every host must start its ranks at once (Ansible: a fork each), and run the collective check alone."""
    if not request.multi_node:
        return
    if request.checks not in ((), ("allreduce",)) or request.image is not None or request.passive:
        raise BadRequest("--multi-node runs the collective check alone", hint="drop --check/--image/--passive")
    if len(hosts) < 2:
        raise BadRequest("--multi-node needs two hosts or more", hint="name the hosts, or a larger --limit")
    if not request.slurm and request.hosts.forks < len(hosts):
        raise BadRequest(
            f"--multi-node: {len(hosts)} hosts must start at once, but --forks is {request.hosts.forks}",
            hint=f"--forks {len(hosts)}",
        )
