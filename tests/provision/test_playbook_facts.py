"""The playbooks' defaults and filter tables agree with the knowledge base and the package metadata.

The roles carry defaults so that a rendered project also runs with plain ansible-playbook; gpuenv
writes the real values into the variables file. These tests keep the two homes from drifting apart.
"""

from __future__ import annotations

from typing import Any

import jinja2
import yaml

from gpuenv.kb import V, load_kb
from gpuenv.platforms.cuda.host import DEBIAN_NONFREE_BRANCH
from gpuenv.provision.variables import ProvisionOptions, host_oses, kb_facts, variables
from gpuenv.requirements import gpuenv_requirements
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import REPO
from tests.provision.test_core import FILTERS

KB = load_kb()


def _defaults(role: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "playbooks/roles" / role / "defaults/main.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _host_oses() -> set[tuple[str, str]]:
    """(ansible_facts.distribution in lower case, version) of every host OS in the knowledge base."""
    return {(distribution.lower(), o.version) for distribution, o in host_oses(KB)}


def _written() -> dict[str, Any]:
    stack = resolve(KB, Request(python="3.11"))
    return variables(stack, ProvisionOptions(), kb_facts(KB, stack))


def test_preflight_supports_exactly_the_knowledge_base_hosts() -> None:
    supported = _defaults("preflight")["preflight_supported"]
    assert {(dist, version) for dist, versions in supported.items() for version in versions} == _host_oses()
    assert supported == _written()["preflight_supported"]


def test_os_names_default_is_what_gpuenv_writes_and_keys_hosts_as_the_knowledge_base_does() -> None:
    defaults = _defaults("pytorch")
    assert defaults["pytorch_os_names"] == _written()["pytorch_os_names"]
    key = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(defaults["pytorch_os_key"])
    for distribution, version, major in (
        ("Debian", "12.5", "12"),
        ("Ubuntu", "22.04", "22"),
        ("Rocky", "9.4", "9"),
        ("AlmaLinux", "9.4", "9"),
    ):
        facts = {"distribution": distribution, "distribution_version": version, "distribution_major_version": major}
        found = key.render(pytorch_os_names=defaults["pytorch_os_names"], ansible_facts=facts).strip()
        known = KB.os_for_host(distribution, version)
        assert found == (known.name if known else f"{distribution} {version}"), (distribution, version)


def test_per_family_tables_cover_the_knowledge_base_families() -> None:
    families = {o.ansible.os_family for _, o in host_oses(KB) if o.ansible}
    assert set(_defaults("pytorch")["pytorch_module_packages"]) == families == {"Debian", "RedHat"}


def test_driver_plan_accepts_exactly_the_knowledge_base_hosts() -> None:
    gpu = [{"kind": "gpu", "device_id": "20b0", "name": "A100"}]
    for dist in ("ubuntu", "debian", "rocky", "redhat", "almalinux", "centos"):
        for version in ("20.04", "22.04", "24.04", "12", "8", "9"):
            facts = {"distribution": dist, "distribution_version": version, "gpus": gpu, "branch": "580"}
            plan = FILTERS.driver_plan(facts)
            accepted = not (plan["action"] == "blocked" and "not supported" in plan["reason"])
            assert accepted == ((dist, version) in _host_oses()), (dist, version, plan["summary"])


def test_minimum_branches_follow_the_first_cuda_of_each_generation() -> None:
    """A generation's floor is the lowest branch any of its members needs (the filter tells only families apart)."""
    oldest = min(V(c.version) for c in KB.cuda)
    expected: dict[str, int] = {}
    for arch in KB.architectures:
        if arch.min_cuda is None or V(arch.min_cuda) < oldest:
            continue  # runs every CUDA gpuenv resolves: no floor beyond the stack's own driver
        cuda = KB.find_cuda(arch.min_cuda)
        assert cuda is not None, arch
        branch = int(cuda.bundled_driver.split(".")[0])
        expected[arch.family] = min(expected.get(arch.family, branch), branch)
    assert expected == FILTERS.MIN_BRANCH


def test_open_module_policy_and_debian_branch_defaults_match() -> None:
    defaults = _defaults("nvidia_driver")
    assert defaults["nvidia_driver_open_modules_policy"] == {a.family: a.open_modules for a in KB.architectures}
    assert defaults["nvidia_driver_debian_nonfree_branch"] == DEBIAN_NONFREE_BRANCH.lstrip("R")


def test_python_defaults_are_what_gpuenv_writes_for_python_311() -> None:
    stack = resolve(KB, Request(python="3.11"))
    written = variables(stack, ProvisionOptions(), kb_facts(KB, stack))
    defaults = _defaults("pytorch")
    assert defaults["pytorch_python"] == stack.python == "3.11"
    assert defaults["pytorch_python_by_os"] == written["pytorch_python_by_os"]


def test_gpuenv_dependencies_are_pinned_as_the_image_gets_them() -> None:
    defaults = _defaults("pytorch")
    assert defaults["pytorch_gpuenv_requirements"] == list(gpuenv_requirements())
    stack = resolve(KB, Request(python="3.11"))
    written = variables(stack, ProvisionOptions(), kb_facts(KB, stack))
    assert written["pytorch_gpuenv_requirements"] == list(gpuenv_requirements())
    assert "click>=8.1" in gpuenv_requirements() and not any(
        r.startswith(("torch", "numpy")) for r in gpuenv_requirements()
    )
