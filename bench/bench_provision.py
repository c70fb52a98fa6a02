"""`gpuenv provision` on real chrooted SSH test hosts, in one run (root, cached rootfs and wheelhouse).

Measures: a first run on one fresh host, the idempotent second run on it (target ≤ 0.5× the first),
and a first run on two fresh hosts together (target ≤ 1.8× one host). Each provisioning installs
Python headers and gcc from Debian's archive, copies the wheelhouse, installs torch into a venv and
certifies with `gpuenv verify --device cpu` when that command is present.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from timing import report, wall

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuenv.selfwheel import build_own_wheel  # noqa: E402
from tests.provision import hosts as test_hosts  # noqa: E402

CACHE = Path(os.environ.get("GPUENV_TEST_CACHE", "/var/cache/gpuenv-test"))
STACK = ["--os", "debian12", "--python", "3.11", "--torch", "2.13.0", "--torch-only"]


def provision(hosts: test_hosts.HostSet, names: list[str], work: Path, wheel: Path) -> float:
    inventory = work / f"{'-'.join(names)}.ini"
    inventory.write_text(hosts.inventory(names))
    verify = ["--verify-device", "cpu"] if (REPO / "gpuenv/cli/verify_cmd.py").is_file() else ["--skip-verify"]
    cmd = [
        sys.executable,
        "-m",
        "gpuenv",
        "-q",
        "provision",
        "-i",
        str(inventory),
        *STACK,
        *verify,
        "--wheelhouse",
        str(CACHE / "wheelhouse"),
        "--gpuenv-wheel",
        str(wheel),
        "--reports-dir",
        str(work / "reports"),
    ]
    env = {**os.environ, **hosts.env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return wall(cmd, timeout=1800, env=env)


def main() -> int:
    ok, reason = test_hosts.available()
    tar = CACHE / "rootfs" / "bookworm.tar"
    if not ok or not tar.is_file():
        print(f"cannot run: {reason or f'no cached rootfs at {tar}'}")
        return 3
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-provision-") as tmp:
        work = Path(tmp)
        wheel = build_own_wheel(work / "wheel")  # one gpuenv for all runs
        hosts = test_hosts.make_hosts(tar, work / "hosts", ["b1", "b2", "b3"], first_address=41)
        try:
            started = time.perf_counter()
            first = provision(hosts, ["b1"], work, wheel)
            second = provision(hosts, ["b1"], work, wheel)
            pair = provision(hosts, ["b2", "b3"], work, wheel)
            print(f"(whole bench {time.perf_counter() - started:.0f}s)")
        finally:
            test_hosts.stop_hosts(hosts)
    results = [
        report("idempotent second run vs first run (one host)", second, first, target=0.5),
        report("two hosts together vs one host (first runs)", pair, first, target=1.8),
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
