"""How `gpuenv fleet verify` scales: the controller's CPU-seconds per host at 1, 8, 32 and 128 hosts.

`python bench/bench_fleet_scale.py [ansible|slurm|collector|all]` (root; the test caches for ansible,
slurm-wlm and munge for slurm).

ansible: one SSH test host provisioned for real and cloned 8 times (bench_fleet_verify's set-up);
the inventory at N hosts names N aliases spread over the 8 clones. Each host runs `verify --check
nvml --passive --device cpu` (no NVML library on the hosts: a cheap run that still sends a report
back), so the controller is what is measured. Side by side, interleaved, per N: `gpuenv fleet verify`
and the floor, a one-task `ansible.builtin.command` playbook running the same command through
`ansible-playbook` over the same inventory, ansible.cfg and forks. Measured: the controller's CPU
time (user + system of the command's whole process tree, from wait4: Ansible, its forks, their ssh;
a host's sshd side is no descendant), per host. Targets: fleet verify's CPU per host <= 1.5x the
floor's at 32 and 128 hosts, and not rising from 8 to 128 hosts. Wall time is printed, not targeted:
on two cores it is the hosts' own runs.

slurm: a Slurm of its own (munged, slurmctld, one slurmd per node on this machine, no hooks);
`gpuenv fleet verify --slurm` over 1, 4 and 16 nodes against the floor, the bare srun step gpuenv
runs (the same options, host file and command). The controller's CPU per node; no target: what is
printed is how little it grows with the nodes.

collector: gpuenv's own share of the controller's work, in one process over 10,000 synthetic 8-GPU
reports (judge, write, keep; then the summary, a new GPU history, the fleet report): CPU per host
and the peak RSS, which is what a run holds per host until its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import bench_fleet_verify as fleet8
from timing import compile_package

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuenv.fleet.onhost import host_command  # noqa: E402
from gpuenv.fleet.request import FleetVerifyRequest, verify_arguments  # noqa: E402
from gpuenv.fleet.slurm_run import srun_arguments  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.provision import hosts as test_hosts  # noqa: E402

HOSTS = (1, 8, 32, 128)
ROUNDS = {1: 3, 8: 3, 32: 3, 128: 2}
FORKS = 16
NODES = (1, 4, 16)
CHECK = ["--check", "nvml", "--passive", "--device", "cpu"]
REQUEST = FleetVerifyRequest(checks=("nvml",), passive=True, device="cpu", venv="/opt/gpuenv/venv")
FLOOR_PLAY = """- name: The floor, one command per host
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the same command
      ansible.builtin.command:
        argv: "{{ fleet_argv }}"
      changed_when: false
      failed_when: false
"""


def measured(cmd: list[str], env: dict[str, str], *, cwd: Path | None = None) -> tuple[float, float, str, int]:
    """(controller CPU seconds of the command's process tree, wall seconds, stdout, exit code)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return usage.ru_utime + usage.ru_stime, wall, out.read().decode(), proc.returncode


# --- ansible -----------------------------------------------------------------------------------


def inventory(clones: test_hosts.HostSet, count: int, path: Path) -> Path:
    lines = ["[gpu]"]
    for n in range(count):
        host = clones.hosts[n % len(clones.hosts)]
        lines.append(f"h{n:03d} " + host.ini_line(clones.key).split(" ", 1)[1])
    path.write_text("\n".join(lines) + "\n")
    return path


def floor_project(work: Path) -> Path:
    project = work / "floor"
    (project / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(REPO / "playbooks" / "ansible.cfg", project / "ansible.cfg")
    (project / "floor.yml").write_text(FLOOR_PLAY)
    argv = host_command(
        verify_arguments(REQUEST), venv=REQUEST.venv, host_timeout_s=REQUEST.host_timeout_s, inputs=False
    )
    (project / "group_vars" / "all" / "floor.yml").write_text(json.dumps({"fleet_argv": argv}))
    return project


def fleet_run(
    inv: Path, count: int, work: Path, env: dict[str, str], *, forks: int = FORKS, extra: tuple[str, ...] = ()
) -> tuple[float, float]:
    reports = Path(tempfile.mkdtemp(dir=work, prefix="reports-"))
    cmd = [sys.executable, "-m", "gpuenv", "fleet", "verify", "-i", str(inv), *CHECK, "--forks", str(forks), *extra]
    cpu, wall, out, _ = measured([*cmd, "--reports-dir", str(reports), "--no-history", "--json"], env)
    rows = json.loads(out)["hosts"]
    if len(rows) != count or not all(r["report"] for r in rows):  # every host ran and answered
        raise SystemExit(f"fleet verify did not run on every host: {[r for r in rows if not r['report']][:3]}")
    shutil.rmtree(reports)
    return cpu, wall


def floor_run(inv: Path, count: int, project: Path, env: dict[str, str]) -> tuple[float, float]:
    cmd = ["ansible-playbook", "-i", str(inv), "--forks", str(FORKS), str(project / "floor.yml")]
    cpu, wall, out, rc = measured(cmd, {**env, "ANSIBLE_CONFIG": str(project / "ansible.cfg")}, cwd=project)
    if rc != 0 or out.count(" ok=1 ") != count:
        raise SystemExit(f"the floor did not run on every host (rc {rc}): {out[-1500:]}")
    return cpu, wall


def ansible_bench() -> bool:
    ok, reason = test_hosts.available()
    tar = fleet8.CACHE / "rootfs" / "bookworm.tar"
    if not ok or not tar.is_file():
        print(f"ansible: cannot run: {reason or 'no cached rootfs'}")
        return False
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-scale-") as tmp:
        work = Path(tmp)
        hosts = test_hosts.make_hosts(tar, work / "hosts", ["root"], first_address=70)
        env = {**os.environ, **hosts.env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        clones = test_hosts.HostSet(hosts.workdir, hosts.key, hosts.known_hosts)
        try:
            fleet8.provision_one(hosts, work, env)
            os.kill(hosts.hosts[0].pid, signal.SIGTERM)  # the root host's files stay: the clones' lower layer
            os.waitpid(hosts.hosts[0].pid, 0)
            hosts.hosts[0].pid = 0
            fleet8.clone(clones, hosts.hosts[0].root, work)
            return ansible_rounds(clones, work, env)
        finally:
            test_hosts.stop_hosts(clones)
            test_hosts.stop_hosts(hosts)
            shutil.rmtree(work / "layers", ignore_errors=True)


def ansible_rounds(clones: test_hosts.HostSet, work: Path, env: dict[str, str]) -> bool:
    project = floor_project(work)
    per_host: dict[int, tuple[float, float]] = {}
    print("hosts | fleet verify CPU/host | floor CPU/host | ratio | wall fleet | wall floor")
    for count in HOSTS:
        inv = inventory(clones, count, work / f"hosts-{count}.ini")
        fleet_run(inv, count, work, env)  # warm: page cache, bytecode, Ansible's module cache
        fleet, floor = [], []
        for _ in range(ROUNDS[count]):
            fleet.append(fleet_run(inv, count, work, env))
            floor.append(floor_run(inv, count, project, env))
        cpu, cpu_floor = (statistics.median(c for c, _ in runs) / count for runs in (fleet, floor))
        walls = [statistics.median(w for _, w in runs) for runs in (fleet, floor)]
        per_host[count] = (cpu, cpu_floor)
        print(
            f"{count} | {cpu:.3f} s | {cpu_floor:.3f} s | {cpu / cpu_floor:.2f} | {walls[0]:.1f} s | {walls[1]:.1f} s"
        )
    variants(clones, work, env)
    met = True
    for count in (32, 128):
        ratio = per_host[count][0] / per_host[count][1]
        met &= ratio <= 1.5
        print(f"{count} hosts: CPU per host {ratio:.2f}x the floor (target <= 1.5) {'ok' if ratio <= 1.5 else 'OVER'}")
    rising = per_host[128][0] / per_host[8][0]
    met &= rising <= 1.0
    print(f"CPU per host 128 vs 8 hosts: {rising:.2f} (target: not rising, <= 1.0) {'ok' if rising <= 1 else 'OVER'}")
    return met


VARIANTS = {  # what else was tried at 32 hosts: (options, environment)
    "--forks 8": (("--forks", "8"), {}),
    "--forks 32": (("--forks", "32"), {}),
    "strategy free": ((), {"ANSIBLE_STRATEGY": "free"}),
    "events kept (--artifacts-dir)": (("--artifacts-dir", "ARTIFACTS"), {}),
}


def variants(clones: test_hosts.HostSet, work: Path, env: dict[str, str]) -> None:
    """At 32 hosts, each variant against the default run beside it: other forks, the free strategy, the
    events kept in ansible-runner's artifacts."""
    inv = inventory(clones, 32, work / "hosts-32.ini")
    for name, (options, extra_env) in VARIANTS.items():
        ratios = []
        for n in range(2):
            given = tuple(str(work / f"artifacts-{name[:6]}-{n}") if o == "ARTIFACTS" else o for o in options)
            forks = int(given[1]) if given[:1] == ("--forks",) else FORKS
            rest = given[2:] if given[:1] == ("--forks",) else given
            default = fleet_run(inv, 32, work, env)[0]
            ratios.append(fleet_run(inv, 32, work, {**env, **extra_env}, forks=forks, extra=rest)[0] / default)
        print(f"32 hosts, {name}: controller CPU {statistics.median(ratios):.2f}x the default's beside it")


# --- slurm -------------------------------------------------------------------------------------


@contextlib.contextmanager
def slurm_cluster(count: int) -> Iterator[tuple[dict[str, str], list[str]]]:
    """munged, slurmctld and `count` slurmd here (no hooks); (the clients' environment, the node names)."""
    from tests.slurm.conftest import NODE, Slurm  # the suite's test Slurm, started here by the same means

    root = Path(tempfile.mkdtemp(prefix="gpuenv-bench-slurm-", dir="/tmp"))
    root.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), "PATH": "/usr/sbin:" + os.environ["PATH"]}
    cluster = Slurm(root, env)
    nodes = [NODE, *(f"b{n:02d}" for n in range(1, count))]
    ports = [free_port() for _ in range(count + 1)]
    lines = [
        "ClusterName=gpuenvbench", f"SlurmctldHost={NODE}(127.0.0.1)", f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge.sock", f"StateSaveLocation={root}/state", f"SlurmctldPidFile={root}/ctld.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/linear", "ReturnToService=2", "MpiDefault=none",
        *(f"NodeName={n} NodeAddr=127.0.0.1 Port={p}" for n, p in zip(nodes, ports[1:], strict=True)),
        f"PartitionName=bench Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP",
    ]  # fmt: skip
    (root / "state").mkdir()
    try:
        subprocess.run(["mungekey", "-c", "-k", str(root / "munge.key"), "-b", "1024"], check=True, timeout=30)
        files = [f"--key-file={root}/munge.key", f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log"]
        cluster.start("munged", "-F", "-S", f"{root}/munge.sock", *files, f"--seed-file={root}/seed")
        cluster.wait_for(lambda: (root / "munge.sock").exists(), 20, "munged did not open its socket")
        (root / "slurm.conf").write_text("\n".join(lines) + "\n")
        cluster.start("slurmctld", "-D", "-i")
        for node in nodes:
            folder = root / node
            (folder / "spool").mkdir(parents=True)
            own = [
                *lines,
                f"SlurmdPidFile={folder}/d.pid",
                f"SlurmdSpoolDir={folder}/spool",
                f"SlurmdLogFile={folder}/d.log",
            ]
            (folder / "slurm.conf").write_text("\n".join(own) + "\n")
            cluster.start(f"slurmd-{node}", "-D", "-N", node, "-f", str(folder / "slurm.conf"))
        idle = lambda: cluster.cmd("sinfo", "-h", "-N", "-o", "%T").split().count("idle") == count  # noqa: E731
        cluster.wait_for(idle, 120, "the bench nodes did not come up idle")
        yield env, nodes
    finally:
        for name in list(cluster.procs)[::-1]:
            cluster.stop(name)
        shutil.rmtree(root, ignore_errors=True)


def slurm_bench() -> bool:
    if os.geteuid() != 0 or shutil.which("slurmctld", path="/usr/sbin:/usr/bin") is None:
        print("slurm: cannot run: needs root and slurm-wlm + munge")
        return False
    venv = str(Path(sys.executable).parent.parent)
    request = FleetVerifyRequest(checks=("nvml",), passive=True, device="cpu", venv=venv)
    print("nodes | fleet verify --slurm CPU/node | bare srun CPU/node | wall fleet | wall srun")
    with slurm_cluster(max(NODES)) as (env, names), tempfile.TemporaryDirectory() as tmp:
        for count in NODES:
            chosen = ",".join(names[:count])
            hostfile = Path(tmp) / "hostfile"
            hostfile.write_text("\n".join(names[:count]) + "\n")
            bare = ["srun", *srun_arguments(request, tasks=count, job_name="bench", inputs=False)]
            fleet = [sys.executable, "-m", "gpuenv", "fleet", "verify", "--slurm", "--nodelist", chosen, *CHECK]
            fleet += ["--venv", venv, "--no-history", "--reports-dir", str(Path(tmp) / "r"), "--json"]
            runs: dict[str, list[tuple[float, float]]] = {"fleet": [], "srun": []}
            for _ in range(3):
                cpu, wall, out, _rc = measured(fleet, env)
                if sum(bool(h["report"]) for h in json.loads(out)["hosts"]) != count:
                    raise SystemExit(f"fleet verify --slurm did not hear from every node: {out[-1500:]}")
                runs["fleet"].append((cpu, wall))
                cpu, wall, out, _rc = measured(bare, {**env, "SLURM_HOSTFILE": str(hostfile)})
                runs["srun"].append((cpu, wall))
            (fc, fw), (sc, sw) = (
                (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for r in runs.values()
            )
            per_node = f"{fc / count:.3f} s ({fc:.2f} s in all) | {sc / count:.3f} s ({sc:.2f} s in all)"
            print(f"{count} | {per_node} | {fw:.1f} s | {sw:.1f} s")
    return True


# --- collector -------------------------------------------------------------------------------


def collector_bench(count: int = 10_000) -> bool:
    """gpuenv's own share, in this process: each host's answer judged and its report written and kept
    (gpuenv.fleet.collect), then the summary, the history and the fleet report; CPU per host, peak RSS."""
    import random
    import resource

    from gpuenv.fleet.collect import Collector
    from gpuenv.fleet.onhost import Answer
    from gpuenv.output.jsontext import json_text
    from tests.fleet import fleet_reports

    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        collected = Collector(Path(tmp), REQUEST.venv)
        adding = 0.0
        for n in range(count):
            raw = json_text(fleet_reports.report(fleet_reports.healthy_node(f"gpu{n:06d}", rng))).encode()
            started = time.process_time()
            collected.add(f"gpu{n:06d}", Answer(3, stdout=raw))
            adding += time.process_time() - started
        started = time.process_time()
        collected.finish("successful", Path(tmp) / "history.sqlite", tuple(collected.outcomes))
        ending = time.process_time() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"collector, {count} reports of {len(raw) >> 10} KiB: {adding / count * 1e3:.2f} ms CPU per host as it")
    print(f"  answers, {ending:.1f} s at the end (summary, history, fleet report); peak RSS {peak:.0f} MiB")
    return True


def main() -> int:
    compile_package()
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    met = True
    if which in ("ansible", "all"):
        met &= ansible_bench()
    if which in ("slurm", "all"):
        met &= slurm_bench()
    if which in ("collector", "all"):
        met &= collector_bench()
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
