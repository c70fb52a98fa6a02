"""The driver decisions per host, worked out on the control machine from the gathered facts.

The decision itself is the playbooks' own filter for the stack's platform (its host half in
gpuenv.platforms: playbooks/filter_plugins/gpuenv_filters.py for NVIDIA's driver, gpuenv_amdgpu.py for
AMD's amdgpu; self-contained so a rendered project runs with plain ansible-playbook); gpuenv feeds it
the facts the gather pass brought back, so the plan shown before anything runs is the plan the driver
role will follow. To that it adds what the loaded driver means: install, upgrade, keep, reboot needed.
"""

from __future__ import annotations

from typing import Any

from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.base import skipped_plan
from gpuenv.platforms.registry import for_stack
from gpuenv.provision.options import ProvisionOptions
from gpuenv.provision.perhost import HostPlan


def driver_plans(kb: KnowledgeBase, options: ProvisionOptions, plans: tuple[HostPlan, ...]) -> dict[str, Any]:
    """The driver plan of each host with a stack, with `action_line` saying what happens to its driver."""
    out: dict[str, Any] = {}
    for plan in plans:
        if plan.stack is None:
            continue
        if not options.driver:
            out[plan.host] = skipped_plan(plan.facts, "--skip-driver")
        else:
            out[plan.host] = for_stack(plan.stack).host.driver_plan(kb, plan.stack, plan.facts, options)
    return out
