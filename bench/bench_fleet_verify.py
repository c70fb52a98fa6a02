"""`gpuenv fleet verify --check nvml` on 8 SSH test hosts against the same on one host (root, caches).

One host is provisioned for real (gpuenv provision, from the cached wheelhouse); eight more are
clones of its root filesystem (overlay mounts over it, each with its own host key, sshd, /proc).
Then, interleaved: fleet verify on one clone, and on all eight at once (--forks 8).
Target: eight hosts ≤ 2× one host. The test hosts have no GPU, so each host's verify ends
"could not run" (NVML finds no library): the bench checks that every host did run it and sent
its report back, and times the fan-out, which is what the ratio is about.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import report

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuenv.selfwheel import build_own_wheel  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.provision import hosts as test_hosts  # noqa: E402

CACHE = Path(os.environ.get("GPUENV_TEST_CACHE", "/var/cache/gpuenv-test"))
STACK = ["--os", "debian12", "--python", "3.11", "--torch", "2.13.0", "--torch-only", "--skip-verify"]
CLONES = 8
RUNS = 3


def gpuenv(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuenv", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def provision_one(hosts: test_hosts.HostSet, work: Path, env: dict[str, str]) -> None:
    inventory = work / "root.ini"
    inventory.write_text(hosts.inventory())
    wheel = build_own_wheel(work / "wheel")
    args = ["-q", "provision", "-i", str(inventory), *STACK, "--wheelhouse", str(CACHE / "wheelhouse")]
    done = gpuenv(*args, "--gpuenv-wheel", str(wheel), env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"provisioning the root host failed: {done.stderr[-2000:]}")


def clone(hosts: test_hosts.HostSet, base: Path, work: Path) -> None:
    """CLONES hosts, each an overlay over the provisioned root with its own host key and sshd."""
    for n in range(CLONES):
        name = f"c{n}"
        layer = work / "layers" / name
        for sub in ("upper", "work"):
            (layer / sub).mkdir(parents=True)
        host = test_hosts.TestHost(name, work / "clones" / name, f"127.0.0.{71 + n}", 0)
        host.root.mkdir(parents=True)
        options = f"lowerdir={base},upperdir={layer / 'upper'},workdir={layer / 'work'}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(host.root)], check=True)
        host.mounts.append(host.root)
        for target, argv in (("proc", ["-t", "proc", "proc"]), ("sys", ["-t", "sysfs", "-o", "ro", "sysfs"])):
            subprocess.run(["mount", *argv, str(host.root / target)], check=True)
            host.mounts.append(host.root / target)
        key = host.root / "etc/ssh/ssh_host_ed25519_key"
        key.unlink()
        key.with_suffix(".pub").unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        host.port = free_port(host.address)
        test_hosts._start_sshd(host)
        hosts.hosts.append(host)
    lines = [f"[{h.address}]:{h.port} {test_hosts._host_key(h)}" for h in hosts.hosts]
    hosts.known_hosts.write_text("\n".join(lines) + "\n")
    for host in hosts.hosts:
        test_hosts._wait_for_ssh(host, timeout=20)


def fleet_verify(hosts: test_hosts.HostSet, names: list[str], work: Path, env: dict[str, str]) -> float:
    inventory = work / f"fleet-{len(names)}.ini"
    inventory.write_text(hosts.inventory(names))
    reports = Path(tempfile.mkdtemp(dir=work, prefix="reports-"))
    args = ["fleet", "verify", "-i", str(inventory), "--check", "nvml", "--forks", str(CLONES), "--json"]
    started = time.perf_counter()
    done = gpuenv(*args, "--reports-dir", str(reports), "--history", str(work / "h.sqlite"), env=env, timeout=900)
    took = time.perf_counter() - started
    outcomes = {h["host"]: (h["outcome"], h["report"]) for h in json.loads(done.stdout)["hosts"]}
    ran = {h for h, (outcome, path) in outcomes.items() if outcome == "could not run" and path}
    if ran != set(names):  # every host ran its verify and sent a report back: else the timing means nothing
        raise SystemExit(f"fleet verify did not run on every host: {outcomes} {done.stderr[-2000:]}")
    return took


def main() -> int:
    ok, reason = test_hosts.available()
    tar = CACHE / "rootfs" / "bookworm.tar"
    if not ok or not tar.is_file() or not any((CACHE / "wheelhouse").glob("torch-*.whl")):
        print(f"cannot run: {reason or f'no cached rootfs or wheelhouse under {CACHE}'}")
        return 3
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-fleet-") as tmp:
        work = Path(tmp)
        hosts = test_hosts.make_hosts(tar, work / "hosts", ["root"], first_address=70)
        env = {**os.environ, **hosts.env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        root = hosts.hosts[0]
        clones = test_hosts.HostSet(hosts.workdir, hosts.key, hosts.known_hosts)
        try:
            started = time.perf_counter()
            provision_one(hosts, work, env)
            os.kill(root.pid, signal.SIGTERM)  # the root host's files stay: the clones' lower layer
            os.waitpid(root.pid, 0)
            root.pid = 0
            clone(clones, root.root, work)
            one, eight = [], []
            for _ in range(RUNS):
                one.append(fleet_verify(clones, ["c0"], work, env))
                eight.append(fleet_verify(clones, [h.name for h in clones.hosts], work, env))
            print(f"(whole bench {time.perf_counter() - started:.0f}s; runs: one {one}, eight {eight})")
        finally:
            test_hosts.stop_hosts(clones)
            test_hosts.stop_hosts(hosts)
            shutil.rmtree(work / "layers", ignore_errors=True)
    return 0 if report(f"{CLONES} hosts vs one host", statistics.median(eight), statistics.median(one), 2.0) else 1


if __name__ == "__main__":
    sys.exit(main())
