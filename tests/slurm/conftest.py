"""A real one-node Slurm on 127.0.0.1: munged, slurmctld and slurmd, started here and stopped by PID.

slurm.conf is generated in a temporary folder (state, spool, logs, the munge key and socket all live
there). Its HealthCheckProgram, Prolog and Epilog are wrapper scripts that run gpuenv from the test
venv; a test steers them by writing a fault (GPUENV_TEST_FAULT) or extra arguments into files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import free_port, require

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch")
NODE = socket.gethostname().split(".")[0]


def _wrapper(root: Path, hook: str, extra: str) -> Path:
    """The script slurmd runs: its environment is bare, so it sets what gpuenv needs."""
    path = root / f"gpuenv-{hook}"
    path.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={root}/slurm.conf PATH=/usr/sbin:/usr/bin:/sbin:/bin GPUENV_NO_CONFIG=1\n"
        f"export GPUENV_TEST_MARK={root.name}\n"
        f'[ -s {root}/{hook}.fault ] && export GPUENV_TEST_FAULT="$(cat {root}/{hook}.fault)"\n'
        f"env > {root}/{hook}.env\n"
        f"exec {sys.executable} -m gpuenv -q slurm {hook} --reports-dir {root}/reports {extra}"
        f" $(cat {root}/{hook}.args 2>/dev/null) 2>>{root}/{hook}.log\n"
    )
    path.chmod(0o755)
    return path


# Nodes beside this one, in the fleet partition only (the default partition stays this node alone):
# each extra slurmd runs here with a config file of its own (pid, spool, log) and listens on its
# node's Port; the ghost node has a Port nothing listens on (no slurmd: Slurm cannot reach it).
EXTRA_NODES = ("n2", "n3")
GHOST = "ghost"


def _slurm_conf(root: Path) -> str:
    ports: list[int] = []
    for _ in range(3 + len(EXTRA_NODES)):
        ports.append(next(port for port in iter(free_port, None) if port not in ports))
    ctld_port, slurmd_port, ghost_port, *extra_ports = ports
    extra = "".join(
        f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs={os.cpu_count() or 1} State=UNKNOWN\n"
        for name, port in zip(EXTRA_NODES, extra_ports, strict=True)
    )
    return f"""ClusterName=gpuenvtest
SlurmctldHost={NODE}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/linear
ReturnToService=2
MpiDefault=none
HealthCheckProgram={root}/gpuenv-health-check
HealthCheckInterval=3600
HealthCheckNodeState=ANY
Prolog={root}/gpuenv-prolog
Epilog={root}/gpuenv-epilog
PrologFlags=Alloc
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
{extra}NodeName={GHOST} NodeAddr=127.0.0.1 Port={ghost_port} CPUs=1 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=fleet Nodes={NODE},{",".join(EXTRA_NODES)},{GHOST} Default=NO MaxTime=INFINITE State=UP
"""


@dataclass
class Slurm:
    root: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def cmd(self, *args: str, timeout: float = 20) -> str:
        proc = subprocess.run(args, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        assert proc.returncode == 0, f"{' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def node(self) -> tuple[str, str]:
        """(state, reason) as sinfo shows them."""
        # one line per partition holding the node (the fleet partition's tests add one): the first is enough
        line = self.cmd("sinfo", "-h", "-N", "-n", NODE, "-o", "%T|%E").strip().splitlines()[0]
        state, _, reason = line.partition("|")
        return state, reason

    def reason_line(self) -> str:
        """scontrol's Reason= line, with who set it and when."""
        out = self.cmd("scontrol", "show", "node", NODE)
        return next((line.strip() for line in out.splitlines() if "Reason=" in line), "")

    def start(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 (kept open for the daemon's life)
        program = name.split("-")[0]  # slurmd-n2: one more slurmd
        self.procs[name] = subprocess.Popen([program, *args], stdout=log, stderr=log, env=self.env)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def wait_for(self, what: Callable[[], bool], timeout: float, message: str) -> None:
        """Polls `what` until it holds; fails at once, with the logs, when a daemon has exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                if what():
                    return
            if exited := [name for name, proc in self.procs.items() if proc.poll() is not None]:
                pytest.fail(f"{message}: {', '.join(exited)} exited\n{self.logs()}")
            time.sleep(0.5)
        pytest.fail(f"{message} within {timeout:.0f} s; sinfo: {self.describe_node()}\n{self.logs()}")

    def describe_node(self) -> str:
        try:
            return "|".join(self.node())
        except (AssertionError, subprocess.TimeoutExpired) as error:
            return str(error).splitlines()[0]

    def logs(self) -> str:
        """The tail of every daemon's log and output, for a failure message."""
        tails = []
        for name in ("slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out", "munged.log", "munged.out"):
            path = self.root / name
            if path.exists() and (tail := path.read_text(errors="replace")[-1500:].strip()):
                tails.append(f"--- {name}\n{tail}")
        return "\n".join(tails)

    def start_controller(self, attempts: int = 3) -> None:
        """slurmctld, answering. It exits when its port was taken between the pick and its bind:
        then it starts again on fresh ports."""
        for _ in range(attempts):
            (self.root / "slurm.conf").write_text(_slurm_conf(self.root))
            self.start("slurmctld", "-D", "-i")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.procs["slurmctld"].poll() is None:
                with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                    if self.cmd("sinfo", "-h", timeout=10):
                        return
                time.sleep(0.5)
            if self.procs["slurmctld"].poll() is None:
                pytest.fail(f"slurmctld did not answer within 60 s\n{self.logs()}")
            self.stop("slurmctld")
        pytest.fail(f"slurmctld exited {attempts} times\n{self.logs()}")

    def start_node(self, name: str) -> None:
        """One more slurmd on this machine, as node `name`, with a config file of its own."""
        folder = self.root / name
        (folder / "spool").mkdir(parents=True, exist_ok=True)
        conf = (self.root / "slurm.conf").read_text()
        for key, value in (
            ("SlurmdPidFile", "slurmd.pid"),
            ("SlurmdSpoolDir", "spool"),
            ("SlurmdLogFile", "slurmd.log"),
        ):
            conf = conf.replace(f"{key}={self.root}/{value}", f"{key}={folder}/{value}")
        (folder / "slurm.conf").write_text(conf)
        self.start(f"slurmd-{name}", "-D", "-N", name, "-f", str(folder / "slurm.conf"))

    def restart_slurmd(self) -> None:
        self.stop("slurmd")
        self.start("slurmd", "-D", "-N", NODE)

    def steer(self, hook: str, *, fault: str = "", args: str = "") -> None:
        (self.root / f"{hook}.fault").write_text(fault)
        (self.root / f"{hook}.args").write_text(args)


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    require(os.geteuid() == 0, "a test Slurm runs its daemons as root")
    missing = [d for d in DAEMONS if shutil.which(d, path="/usr/sbin:/usr/bin") is None]
    require(not missing, f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    # munged wants every folder above its socket searchable by all, and nothing group/world-writable
    root = Path(tempfile.mkdtemp(prefix="gpuenv-slurm-", dir="/tmp"))
    root.chmod(0o755)
    for sub in ("state", "spool", "reports"):
        (root / sub).mkdir()
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), "GPUENV_TEST_MARK": root.name}
    env["PATH"] = "/usr/sbin:" + env.get("PATH", "/usr/bin:/bin")
    cluster = Slurm(root, env)
    for hook, extra in (
        # nvml alone is quick; a test adds slower checks (torch's) through the .args file
        ("health-check", "--max-time 55 --check nvml"),
        ("prolog", "--max-time 170 --check stack"),
        ("epilog", ""),
    ):
        _wrapper(root, hook, extra)
        cluster.steer(hook)
    subprocess.run(["mungekey", "-c", "-k", str(root / "munge.key"), "-b", "1024"], check=True, timeout=30)
    try:
        cluster.start(
            "munged", "-F", f"--key-file={root}/munge.key", "-S", f"{root}/munge.sock",
            f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log", f"--seed-file={root}/munged.seed",
        )  # fmt: skip
        cluster.wait_for(lambda: (root / "munge.sock").exists(), 20, "munged did not open its socket")
        cluster.start_controller()
        cluster.start("slurmd", "-D", "-N", NODE)
        cluster.wait_for(lambda: cluster.node()[0] == "idle", 120, "the node did not come up idle")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.cmd("scancel", "--full", "--partition", "debug")
        for name in (*(f"slurmd-{n}" for n in EXTRA_NODES), "slurmd", "slurmctld", "munged"):
            cluster.stop(name)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def idle(slurm: Slurm) -> Slurm:
    """The node idle and every hook unsteered, whatever the previous test left."""
    for hook in ("health-check", "prolog", "epilog"):
        slurm.steer(hook)
    with contextlib.suppress(Exception):
        slurm.cmd("scancel", "--full", "--partition", "debug")
    if "drain" in slurm.node()[0]:
        slurm.cmd("scontrol", "update", f"nodename={NODE}", "state=resume")
    slurm.wait_for(lambda: slurm.node()[0] == "idle", 60, "the node did not go back to idle")
    return slurm


@pytest.fixture(scope="session")
def fleet_nodes(slurm: Slurm) -> tuple[str, ...]:
    """The fleet partition's nodes that have a slurmd: this one and EXTRA_NODES (started on first use)."""
    for name in EXTRA_NODES:
        if f"slurmd-{name}" not in slurm.procs:
            slurm.start_node(name)
    return (NODE, *EXTRA_NODES)


@pytest.fixture
def fleet_idle(slurm: Slurm, fleet_nodes: tuple[str, ...]) -> Slurm:
    """Every node of the fleet partition with a slurmd idle, none drained, no job left."""
    with contextlib.suppress(Exception):
        slurm.cmd("scancel", "--full", "--partition", "fleet")

    def states() -> dict[str, str]:
        rows = slurm.cmd("sinfo", "-h", "-N", "-p", "fleet", "-o", "%N|%T").split()
        return dict(row.split("|") for row in rows)

    for node, state in states().items():
        if node in fleet_nodes and "drain" in state:
            slurm.cmd("scontrol", "update", f"nodename={node}", "state=resume")
    slurm.wait_for(lambda: all(states()[n] == "idle" for n in fleet_nodes), 90, "the fleet nodes did not come up idle")
    return slurm


def leftover_processes(mark: str) -> list[int]:
    """PIDs whose environment carries this test mark (gpuenv, verify and their workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if f"GPUENV_TEST_MARK={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def new_mark() -> str:
    return uuid.uuid4().hex


# the fake libamd_smi.so and an AMD PCI bus, for the hooks' AMD GPU mapping (tests/slurm/test_amd_gpus.py)
from tests.verify.test_amdsmi import amd_sysfs as amd_sysfs  # noqa: E402
from tests.verify.test_amdsmi import fake_rocm as fake_rocm  # noqa: E402
