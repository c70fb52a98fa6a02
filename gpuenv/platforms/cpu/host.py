"""CPU's host half: a host that takes torch's CPU build (no GPU on it, or the CPU build asked for); no driver. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.base import GpuFound, Resolver, skipped_plan
from gpuenv.resolve.request import Request
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.provision.hostfacts import GatheredHost
    from gpuenv.provision.options import ProvisionOptions


class CpuHost:
    pci_vendor: str | None = None  # a CPU stack serves no GPU
    vendor: str = ""
    gpus_wanted: str = "no GPU"

    def identify(self, kb: KnowledgeBase, device_id: str) -> GpuFound:
        raise BadRequest(f"a PCI device {device_id} is no GPU of the CPU platform", hint="report a bug")

    def matches(self, kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool | None:
        return None  # no --gpu names a CPU

    def stack(self, kb: KnowledgeBase, constraints: Request, facts: GatheredHost, resolve: Resolver) -> Stack:
        """Torch's CPU build: the request's --driver is for the hosts with GPUs, not this one."""
        return resolve(kb, replace(constraints, platform="cpu", driver=None))

    def refusal(self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, kept_driver: str | None) -> str | None:
        return None  # any host runs torch's CPU build

    def warnings(self, facts: GatheredHost, *, skip_driver: bool) -> list[str]:
        return []

    def kept_driver(self, facts: GatheredHost) -> str | None:
        return None

    def variables(self, kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> dict[str, Any]:
        branch = validate.driver_branch(options.driver_branch) if options.driver_branch else ""
        return {"nvidia_driver_enabled": False, "nvidia_driver_branch": branch}

    def driver_plan(
        self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, options: ProvisionOptions
    ) -> dict[str, Any]:
        return skipped_plan(facts, "a CPU stack needs none")
