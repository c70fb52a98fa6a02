"""The "add a platform" recipe of docs/architecture.md, followed once on a copy of the package: a toy platform
(its name, a package with its halves, one registry entry) resolves, renders an image and plans a host
through the commands, untouched; mypy (strict) holds it to the whole Protocol, and refuses it a member short."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpuenv
from tests.conftest import REPO, require

TOY = '''"""Toy: a made-up accelerator (PCI vendor 1234) whose torch build "toy" needs no driver."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuenv.kb import ForwardCompat, KnowledgeBase, OsInfo, TorchRelease, V
from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Claim, GpuFound, Halves, ImageText, Resolver, Row, skipped_plan
from gpuenv.platforms.node import Unsupported
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.resolve.candidates import Candidate, Refused
from gpuenv.resolve.request import Request, numpy_requirement
from gpuenv.stack import NONE, Rejected, Stack
from gpuenv.types import CpuArch, PlatformName

if TYPE_CHECKING:
    from gpuenv.provision.options import ProvisionOptions
    from gpuenv.render.options import ImageOptions

NAME: PlatformName = "toy"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64",)


@dataclass(frozen=True)
class ToyResolution:
    kb: KnowledgeBase
    request: Request
    os_info: OsInfo
    cpu_arch: CpuArchFacts
    option: str = "platform"
    rank_words: tuple[str, ...] = ("no torchvision yet", "an older release")

    def builds(self, torch: TorchRelease) -> tuple[tuple[str, ...], str]:
        return ("toy",), ""

    def why_not(self, torch: TorchRelease, build: str) -> tuple[str, str] | None:
        return None

    def forward_compat(self, build: str) -> ForwardCompat | None:
        return None

    def rank(self, c: Candidate) -> tuple[Any, ...]:
        return c.torch.torchvision is not None, V(c.torch.version)

    def stack(self, best: Candidate, survivors: list[Candidate], rejected: tuple[Rejected, ...]) -> Stack:
        source, image = self.os_info.python[best.python], self.os_info.image or ""
        return Stack(
            best.torch.version, best.torch.torchvision, best.torch.torchaudio, NAME, "toy", NONE, None, best.python,
            source, self.os_info.name, {"runtime": image, "devel": image}, self.kb.index_url("toy"),
            numpy_requirement(best.torch.version), NONE, NONE, NONE, None, NONE, False,
            reasons={"torch": "newest release", "build": "the toy build"}, rejected=rejected,
        )

    def refusal_line(self, constraint: str, refused: list[Refused], flag: str) -> str | None:
        return None

    def hints(self) -> list[str]:
        return []


@dataclass(frozen=True)
class ToyResolve:
    cpu_arch: CpuArchFacts
    option: str = "platform"
    spellings: str = "toy"
    builds_spelled: str = "toy"

    def claims(self, kb: KnowledgeBase, request: Request) -> Claim | None:
        return None

    def owns(self, build: str) -> bool:
        return build == "toy"

    def asks(self, build: str) -> dict[str, str]:
        return {"platform": NAME}

    def release(self, text: str) -> str | None:
        return None

    def pin(self, kb: KnowledgeBase, request: Request, version: str, build: str) -> Request | None:
        return replace(request, torch=version, platform=NAME) if self.owns(build) else None

    def start(self, kb: KnowledgeBase, request: Request, os_info: OsInfo) -> ToyResolution:
        return ToyResolution(kb, request, os_info, self.cpu_arch)

    def rows(self, stack: Stack) -> list[Row]:
        return [("toy build", stack.build, "build")]

    def software(self, stack: Stack) -> str:
        return "a toy accelerator"

    def check_stack(self, stack: Stack) -> None:
        stack.unset(("cuda", "driver_min", "driver_floor", "driver_branch", "arch_list"))


@dataclass(frozen=True)
class ToyImage:
    images: str = "container"
    wheelhouse_needs: tuple[str, ...] = ()

    def variant(self, stack: Stack, options: ImageOptions) -> str:
        return options.flavor

    def unsupported(self, stack: Stack, options: ImageOptions) -> Unsupported | None:
        return Unsupported("--cudnn: a toy has no cuDNN", "drop --cudnn") if options.cudnn else None

    def labels(self, stack: Stack, options: ImageOptions) -> dict[str, str]:
        return {"build": stack.build}

    def host_labels(self, stack: Stack) -> dict[str, str]:
        return {}

    def text(self, stack: Stack, options: ImageOptions) -> ImageText:
        path = (("PATH", "/opt/venv/bin:$PATH"),)
        return ImageText(("Needs a toy on the host.",), "the OS image plus Python", None, path)

    def notes(self, stack: Stack, options: ImageOptions, variant: str) -> list[str]:
        return ["base is the OS image: a toy needs nothing more"]


@dataclass(frozen=True)
class ToyHost:
    pci_vendor: str | None = "1234"
    vendor: str = "Toy"
    gpus_wanted: str = "toy accelerators"

    def identify(self, kb: KnowledgeBase, device_id: str) -> GpuFound:
        return GpuFound("Toy-1", "t1", "Toy-1 (t1)", "a toy", ())

    def matches(self, kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool | None:
        return None

    def stack(self, kb: KnowledgeBase, constraints: Request, facts: GatheredHost, resolve: Resolver) -> Stack:
        return resolve(kb, replace(constraints, platform=NAME))

    def refusal(self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, kept_driver: str | None) -> str | None:
        return None

    def warnings(self, facts: GatheredHost, *, skip_driver: bool) -> list[str]:
        return []

    def kept_driver(self, facts: GatheredHost) -> str | None:
        return None

    def variables(self, kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> dict[str, Any]:
        return {"nvidia_driver_enabled": False, "nvidia_driver_branch": ""}

    def driver_plan(
        self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, options: ProvisionOptions
    ) -> dict[str, Any]:
        return skipped_plan(facts, "a toy needs no driver")


def platform(arch: CpuArchFacts) -> Halves[ToyResolve, ToyImage, ToyHost]:
    node = Unsupported("a toy has no management library", "verify --device cpu")  # no GPU node to read
    return Halves(NAME, "Toy", arch, ToyResolve(arch), ToyImage(), ToyHost(), node)
'''

PLAN = """
import json, sys
from gpuenv.kb import load_kb
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.options import ProvisionOptions
from gpuenv.provision.perhost import HostRequest, plan_hosts
kb = load_kb()
raw = {"distribution": "Ubuntu", "distribution_version": "22.04", "architecture": "x86_64", "kernel": "6.8",
       "devices": [{"kind": "gpu", "vendor": "1234", "device_id": "0001", "name": "Toy-1"}]}
(plan,) = plan_hosts(kb, HostRequest(), [facts_from_gathered("t1", raw, kb)])
print(json.dumps({"stack": plan.stack.to_dict(), "refused": plan.refused,
                  "driver": driver_plans(kb, ProvisionOptions(), (plan,))["t1"]["action_line"]}))
"""


def follow_the_recipe(root: Path) -> Path:
    package = root / "gpuenv"
    shutil.copytree(Path(gpuenv.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "_shipped"))
    for shipped in ("templates", "playbooks", "images"):
        (root / shipped).symlink_to(REPO / shipped)
    # 1. its name, in the closed vocabulary every layer shares
    types = package / "types.py"
    types.write_text(
        types.read_text().replace(
            'PlatformName = Literal["cuda", "rocm", "cpu"]', 'PlatformName = Literal["cuda", "rocm", "cpu", "toy"]'
        )
    )
    # 2. its package: the resolve, image and host halves
    (package / "platforms" / "toy").mkdir()
    (package / "platforms" / "toy" / "__init__.py").write_text(TOY)
    # 3. its entry in the registry, after the others
    registry = package / "platforms" / "registry.py"
    text = registry.read_text().replace(
        "from gpuenv.platforms.rocm import halves as rocm\n",
        "from gpuenv.platforms.rocm import halves as rocm\nfrom gpuenv.platforms import toy\n",
    )
    text = text.replace(
        "    Entry(cpu.NAME, cpu.platform, cpu.CPU_ARCHES),\n",
        "    Entry(cpu.NAME, cpu.platform, cpu.CPU_ARCHES),\n    Entry(toy.NAME, toy.platform, toy.CPU_ARCHES),\n",
    )
    registry.write_text(text)
    return root


def run_copy(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip


def test_a_platform_added_by_the_recipe_resolves_renders_and_plans_a_host(tmp_path: Path) -> None:
    root = follow_the_recipe(tmp_path)
    done = run_copy(root, "-m", "gpuenv", "resolve", "--platform", "toy", "--json")
    assert done.returncode == 0, done.stderr
    stack = json.loads(done.stdout)
    assert (stack["platform"], stack["build"], stack["index_url"]) == (
        "toy",
        "toy",
        "https://download.pytorch.org/whl/toy",
    )
    assert json.loads(run_copy(root, "-m", "gpuenv", "resolve", "--torch-backend", "toy", "--json").stdout) == stack
    out = tmp_path / "image"
    done = run_copy(root, "-m", "gpuenv", "build-image", "--platform", "toy", "--render-only", str(out))
    assert done.returncode == 0, done.stderr
    dockerfile = (out / "Dockerfile").read_text()
    assert "on a toy accelerator" in dockerfile and "# Needs a toy on the host." in dockerfile
    assert 'io.gpuenv.build="toy"' in dockerfile and "ARG BASE_IMAGE=ubuntu:22.04" in dockerfile
    refused = run_copy(
        root, "-m", "gpuenv", "build-image", "--platform", "toy", "--cudnn", "--render-only", str(out) + "2"
    )
    assert refused.returncode == 2 and "a toy has no cuDNN" in refused.stderr
    planned = run_copy(root, "-c", PLAN)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["refused"] is None and plan["stack"]["platform"] == "toy"
    assert plan["driver"] == "no driver loaded, none installed (a toy needs no driver)"


@pytest.mark.slow
def test_mypy_holds_the_toy_to_the_whole_protocol(tmp_path: Path) -> None:
    mypy = shutil.which("mypy")
    require(mypy is not None, "needs mypy (the test extra)")
    assert mypy is not None
    root = follow_the_recipe(tmp_path)
    check = [
        mypy,
        "--strict",
        "--follow-imports=silent",
        "--cache-dir",
        str(tmp_path / "cache"),
        "gpuenv/platforms/registry.py",
    ]
    done = subprocess.run(check, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stdout
    toy = root / "gpuenv" / "platforms" / "toy" / "__init__.py"
    toy.write_text(toy.read_text().replace("    def hints(self) -> list[str]:\n        return []\n", ""))
    done = subprocess.run(check, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 1 and 'Argument 2 to "Entry" has incompatible type' in done.stdout, done.stdout
