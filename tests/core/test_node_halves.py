"""The node half of each platform, through the one dispatch verify, tune power and the Slurm hooks use
(gpuenv.platforms.nodes): each GPU platform's node is the registry's, each answers the same questions
(its library, its bus, its variables, its torch build), and the health check answers to `health`."""

from __future__ import annotations

from types import SimpleNamespace

import click
import pytest

from gpuenv.cli.params import CHECK_NAMES
from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode, Unsupported
from gpuenv.platforms.registry import REGISTRY
from gpuenv.slurm import core
from gpuenv.verify.model import HEALTH


def test_every_platform_has_a_node_half_and_the_gpu_ones_are_the_dispatch_s() -> None:
    halves = {name: p.node for (name, _), p in REGISTRY.items()}
    assert isinstance(halves["cpu"], Unsupported) and halves["cpu"].reason
    gpu = [n for n in halves.values() if isinstance(n, GpuNode)]
    assert set(map(id, gpu)) == set(map(id, nodes.GPU_NODES))  # one object per platform, whatever the arch
    assert [n.smi for n in nodes.GPU_NODES] == ["nvml", "amdsmi"]  # NVML first: its probe watches XIDs


@pytest.mark.parametrize("node", nodes.GPU_NODES, ids=lambda n: n.smi)
def test_each_gpu_node_answers_the_same_questions(node: GpuNode) -> None:
    assert nodes.for_smi(node.smi) is node
    assert nodes.on_bus({node.smi: ["0000:18:00.0"]}) is node
    assert node.visible([{"index": 0}, {"index": 1}], {}) is None  # no variable: every GPU
    assert node.job_variables and core.job_gpu_env({}, node) == {}
    first, *others = node.job_variables
    picked = core.job_gpu_env({"SLURM_JOB_GPUS": "4,5"}, node)
    assert picked == {first: "4,5", **dict.fromkeys(others)}
    assert all(callable(getattr(node.management, f)) for f in ("init", "snapshot", "power_mw", "energy_mj"))


def test_a_torch_build_names_its_node() -> None:
    cuda, rocm, cpu = (SimpleNamespace(cuda=c, hip=h) for c, h in (("12.8", None), (None, "6.4.43482"), (None, None)))
    assert nodes.for_torch(cuda) is nodes.GPU_NODES[0] and nodes.torch_build(cuda) == "CUDA 12.8"
    assert nodes.for_torch(rocm) is nodes.GPU_NODES[1] and nodes.torch_build(rocm) == "ROCm (HIP 6.4.43482)"
    assert nodes.for_torch(cpu) is None and nodes.torch_build(cpu) is None


def test_no_gpu_on_the_bus_is_the_first_platform_s_node() -> None:
    assert nodes.on_bus({}) is nodes.GPU_NODES[0]
    both = {"nvml": ["0000:18:00.0"], "amdsmi": ["0000:c1:00.0"]}
    assert nodes.on_bus(both) is nodes.GPU_NODES[0]  # a mixed node is read as NVIDIA's, as before


def test_the_health_check_answers_to_health_and_nvml() -> None:
    assert CHECK_NAMES.convert("health", None, None) == HEALTH == "nvml"  # the report's name stays nvml
    assert CHECK_NAMES.convert("nvml", None, None) == HEALTH
    with pytest.raises(click.BadParameter):
        CHECK_NAMES.convert("healthy", None, None)
