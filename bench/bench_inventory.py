"""Loading a 100k-host inventory: gpuenv against `ansible-inventory --list` on the same file.

gpuenv loads inventories through `ansible-inventory --list` (plus a libyaml pre-scan and its own
validation), so Ansible's own time is the floor. Measured interleaved in one run, for an INI and a
YAML inventory of 100,000 hosts each with an address and a port:

- loading (`gpuenv.ansible.loader.load_inventory`, in a fresh interpreter): target ≤ 1.3×;
- `gpuenv provision -i FILE --render-only DIR` (resolve, load, validate, render the project):
  target ≤ 2×.

Usage: .venv/bin/python bench/bench_inventory.py [HOSTS] [RUNS]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from timing import medians, report

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuenv.selfwheel import build_own_wheel  # noqa: E402

STACK = ["--os", "debian12", "--python", "3.11", "--torch", "2.13.0"]
LOAD = (
    "import sys; from pathlib import Path; from gpuenv.ansible.loader import load_inventory; "
    "assert len(load_inventory(Path(sys.argv[1])).hosts) == int(sys.argv[2])"
)


def address(i: int) -> str:
    return f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"


def write_ini(path: Path, hosts: int) -> None:
    lines = ["[gpu]"] + [f"node{i:06d} ansible_host={address(i)} ansible_port={2200 + i % 100}" for i in range(hosts)]
    path.write_text("\n".join([*lines, "", "[gpu:vars]", "ansible_user=ubuntu", ""]))


def write_yaml(path: Path, hosts: int) -> None:
    lines = ["all:", "  children:", "    gpu:", "      vars:", "        ansible_user: ubuntu", "      hosts:"]
    lines += [
        f"        node{i:06d}: {{ansible_host: {address(i)}, ansible_port: {2200 + i % 100}}}" for i in range(hosts)
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    hosts = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    ansible_inventory = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent))
    if ansible_inventory is None:
        print("cannot run: ansible-inventory is not installed (pip install 'gpuenv[ansible]')")
        return 3
    ok = True
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-inventory-") as tmp:
        work = Path(tmp)
        wheel = build_own_wheel(work / "wheel")
        for kind, write in (("ini", write_ini), ("yml", write_yaml)):
            inventory = work / f"hosts.{kind}"
            write(inventory, hosts)
            project = work / f"project-{kind}"
            render = (
                f"rm -rf {project} && {sys.executable} -m gpuenv -q provision -i {inventory} {' '.join(STACK)} "
                f"--gpuenv-wheel {wheel} --render-only {project}"
            )
            times = medians(
                {
                    "ansible": [ansible_inventory, "-i", str(inventory), "--list"],
                    "load": [sys.executable, "-c", LOAD, str(inventory), str(hosts)],
                    "render": ["sh", "-c", render],
                },
                runs=runs,
                warmup=0,
            )
            print(f"{hosts} hosts, {kind.upper()} ({inventory.stat().st_size / 1e6:.1f} MB), {runs} run(s):")
            ok &= report(f"  load {kind}", times["load"], times["ansible"], 1.3)
            ok &= report(f"  provision --render-only {kind}", times["render"], times["ansible"], 2.0)
    return 0 if ok else 1


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
