"""The preconditions a run needs (pure): a GPU for a run on the GPUs, torch able to run a workload.
Each one missing, and its healthy controls, swept over what the engine and the checks report."""

from __future__ import annotations

import pytest

from gpuenv.verify.catalogue import finding, rules
from gpuenv.verify.facts import GpuInfo, HostFacts
from gpuenv.verify.model import CheckResult
from gpuenv.verify.preconditions import IMPORT_FAILED, TORCH_UNUSABLE, missing_gpu, skipped, torch_unusable

NOTHING = HostFacts(nvml="library-not-found")


@pytest.mark.parametrize(
    "host",
    [
        HostFacts(nvml="driver-not-loaded", pci_nvidia=("0000:18:00.0",)),  # on the bus, driver down
        HostFacts(nvml="ok", gpus=(GpuInfo(0),)),  # NVML names it (no sysfs here)
        HostFacts(nvml="ok", smi="amdsmi", pci_amd=("0000:05:00.0",)),
        HostFacts(nvml="amdsmi not installed", smi="amdsmi", pci_amd=("0000:05:00.0",)),
    ],
)
def test_a_gpu_node_meets_the_gpu_precondition_whatever_its_library_says(host: HostFacts) -> None:
    assert missing_gpu("cuda", host) is None


def test_a_run_on_the_gpus_without_one_misses_it_naming_what_was_looked_at() -> None:
    assert missing_gpu("cuda", NOTHING) == (
        "--device cuda, but this node has no GPU: none on the PCI bus, NVML: library-not-found"
    )
    assert missing_gpu("cpu", NOTHING) is None  # the CPU path needs no GPU


@pytest.mark.parametrize("code", sorted(TORCH_UNUSABLE))
def test_each_finding_that_torch_cannot_run_here_stops_the_torch_checks_after_it(code: str) -> None:
    assert code in rules()  # a code of the catalogue
    result = CheckResult("stack", "fail", findings=[finding(code, "torch cannot")])
    assert torch_unusable(result) == "stack found that torch cannot run here"


def test_torch_not_importable_stops_them_and_other_results_do_not() -> None:
    assert torch_unusable(CheckResult("amp", "error", detail={IMPORT_FAILED: "torch"})) is not None
    assert torch_unusable(CheckResult("onnx", "error", detail={IMPORT_FAILED: "onnxruntime"})) is None
    onnx = CheckResult("onnx", "fail", findings=[finding("verify.import-failed", "m")], detail={IMPORT_FAILED: "onnx"})
    assert torch_unusable(onnx) is None  # on a GPU node: a failure, but of the onnx check alone
    others = [c for c in rules() if c not in TORCH_UNUSABLE]
    for code in others:  # every other finding, of any severity, leaves the next checks to run
        assert torch_unusable(CheckResult("x", "fail", findings=[finding(code, "m")])) is None, code
    assert torch_unusable(CheckResult("stack", "pass")) is None


def test_a_skipped_check_says_why_in_its_summary_and_detail() -> None:
    result = skipped("amp", "stack found that torch cannot run here")
    assert (result.status, result.summary) == ("skip", "not run: stack found that torch cannot run here")
    assert result.detail == {"precondition": "stack found that torch cannot run here"}
