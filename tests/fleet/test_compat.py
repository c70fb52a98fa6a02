"""`gpuenv fleet compat` through the CLI, over generated fleets (tests/fleet/compat_fleet.py)."""

from __future__ import annotations

import json

import pytest

from gpuenv.fleet.rollout import ImageFacts, image_request, lock_request
from gpuenv.kb import load_kb
from tests.conftest import gpuenv_main
from tests.fleet.compat_fleet import FLEET, Spec, write_fleet

CU128 = "2.7.0+cu128"


def compat(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = gpuenv_main("fleet", "compat", *args, "--json")
    return code, json.loads(capsys.readouterr().out)


def states(doc: dict) -> dict[str, str]:
    return {h["host"]: h["state"] for h in doc["hosts"]}


def test_a_cu128_stack_is_refused_for_the_v100_hosts_and_the_old_drivers_each_named(tmp_path, capsys) -> None:
    code, doc = compat(capsys, str(write_fleet(tmp_path)), "--torch", CU128)
    assert code == 1
    assert states(doc) == {
        "v100-001": "no",
        "v100-002": "no",
        "a100-001": "no",  # R470 cannot run CUDA 12.8
        "a100-002": "caveat",  # R535: minor-version compatibility
        "h100-001": "caveat",  # R550
        "h100-002": "runs",
        "h100-003": "runs",
        "h100-004": "runs",
        "b200-001": "runs",
        "b200-002": "runs",
        "rtx5090-001": "runs",
        "mi300x-001": "no",
    }
    groups = {(g["state"], g["reason"]): g["hosts"] for g in doc["groups"]}
    assert groups[("no", "its GPU code is sm_75…sm_120 (+PTX 12.0): no kernel for Volta sm_70")] == "v100-[001-002]"
    assert groups[("no", "driver 470.256.02 is below 525.60.13, the lowest driver that runs CUDA 12.8")] == "a100-001"
    assert any(reason.startswith("minor-version compatibility in use: driver 535") for _, reason in groups)
    assert groups[("runs", "")] == "b200-[001-002],h100-[002-004],rtx5090-001"


def test_every_host_running_it_exits_0_and_a_caveat_fails_only_under_strict(tmp_path, capsys) -> None:
    healthy = tuple(s for s in FLEET if s.code in ("9.0", "10.0") and s.driver >= "570")
    code, doc = compat(capsys, str(write_fleet(tmp_path / "ok", healthy)), "--torch", CU128)
    assert (code, set(states(doc).values())) == (0, {"runs"})
    warned = (*healthy, Spec("h100-009", "NVIDIA H100", "9.0", "550.54.15"))
    folder = str(write_fleet(tmp_path / "warn", warned))
    assert compat(capsys, folder, "--torch", CU128)[0] == 0
    assert compat(capsys, folder, "--torch", CU128, "--strict")[0] == 1


def test_a_stale_a_future_dated_and_an_unreadable_host_are_unknown_never_runs(tmp_path, capsys) -> None:
    specs = (
        Spec("h100-001", "NVIDIA H100", "9.0", "570.124.06", age_days=45),
        Spec("h100-002", "NVIDIA H100", "9.0", "570.124.06", age_days=-3),
    )
    folder = write_fleet(tmp_path, specs)
    (folder / "h100-003.json").write_text('{"schema": "gpuenv.verify-report/2", "host": 5}')
    code, doc = compat(capsys, str(folder), "--torch", CU128)
    assert code == 1
    assert set(states(doc).values()) == {"unknown"} and len(doc["hosts"]) == 3
    reasons = " ".join(r for h in doc["hosts"] for r in h["reasons"])
    assert (
        "45 days old (over 30)" in reasons
        and "ahead of this machine's clock" in reasons
        and "cannot be read" in reasons
    )
    assert states(compat(capsys, str(folder), "--torch", CU128, "--max-age", "60")[1])["h100-001"] == "runs"


def test_a_report_without_the_driver_or_the_compute_capability_is_unknown(tmp_path, capsys) -> None:
    folder = write_fleet(tmp_path, (Spec("h100-001", "NVIDIA H100", "9.0", "570.124.06"),))
    doc = json.loads((folder / "h100-001.json").read_text())
    doc["stack"] = {}
    doc["checks"][0]["metrics"].pop("driver")
    (folder / "h100-001.json").write_text(json.dumps(doc))
    assert compat(capsys, str(folder), "--torch", CU128)[1]["hosts"][0]["reasons"] == [
        "its report does not give the driver version"
    ]
    for gpu in doc["host"]["gpus"]:
        gpu["compute_capability"] = None
    (folder / "h100-001.json").write_text(json.dumps(doc))
    code, out = compat(capsys, str(folder), "--torch", CU128)
    assert (
        code == 1 and out["hosts"][0]["state"] == "unknown" and "no compute capability" in out["hosts"][0]["reasons"][0]
    )


def test_the_cpu_architecture_rule_warn_fail_and_control(tmp_path, capsys) -> None:
    specs = (
        Spec("gh200-001", "NVIDIA GH200 480GB", "9.0", "570.124.06", cpu_arch="aarch64"),  # fail
        Spec("h100-001", "NVIDIA H100", "9.0", "570.124.06", cpu_arch=None),  # warn: an older report
        Spec("h100-002", "NVIDIA H100", "9.0", "570.124.06"),  # control
    )
    code, doc = compat(capsys, str(write_fleet(tmp_path, specs)), "--torch", CU128)
    assert code == 1
    assert states(doc) == {"gh200-001": "no", "h100-001": "caveat", "h100-002": "runs"}
    assert doc["hosts"][0]["reasons"] == ["the stack is built for x86_64, the host is aarch64"]


def test_a_rocm_stack_runs_on_the_mi300x_hosts_only(tmp_path, capsys) -> None:
    code, doc = compat(capsys, str(write_fleet(tmp_path)), "--gpu", "MI300X")
    assert code == 1
    assert [h for h, s in states(doc).items() if s == "runs"] == ["mi300x-001"]
    assert "a ROCm build needs AMD Instinct GPUs; Tesla V100-SXM2-32GB (sm_70) is NVIDIA's" in json.dumps(doc)


def test_a_stack_file_and_markdown(tmp_path, capsys) -> None:
    assert gpuenv_main("resolve", "--torch", CU128, "--json") == 0
    stack = tmp_path / "stack.json"
    stack.write_text(capsys.readouterr().out)
    folder = str(write_fleet(tmp_path / "fleet"))
    assert gpuenv_main("fleet", "compat", folder, "--stack", str(stack), "--markdown") == 1
    text = capsys.readouterr().out
    assert text.startswith("# Fleet compatibility") and "| does not run | its GPU code is sm_75…sm_120" in text
    assert "v100-[001-002]" in text


def test_a_lockfile_pin_is_checked(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("--index-url https://download.pytorch.org/whl/cu128\ntorch==2.7.0\nnumpy<3\n")
    code, doc = compat(capsys, folder, "--requirements", str(requirements))
    assert code == 1 and doc["stack"]["build"] == "cu128" and states(doc)["v100-001"] == "no"
    pylock = tmp_path / "pylock.toml"
    pylock.write_text(
        'lock-version = "1.0"\ncreated-by = "uv"\n[[packages]]\nname = "torch"\nversion = "2.7.0+cu128"\n'
        'index = "https://download.pytorch.org/whl/cu128"\n[[packages.wheels]]\n'
        'url = "https://download.pytorch.org/whl/cu128/torch-2.7.0%2Bcu128-cp310-cp310-manylinux_2_28_x86_64.whl"\n'
    )
    code, doc = compat(capsys, folder, "--requirements", str(pylock))
    assert (code, doc["stack"]["torch"], doc["stack"]["python"]) == (1, "2.7.0", "3.10")
    assert states(doc)["a100-001"] == "no" and states(doc)["h100-002"] == "runs"


def test_a_uv_lock_and_a_plain_pypi_pin(tmp_path) -> None:
    kb = load_kb(None)
    uv = tmp_path / "uv.lock"
    uv.write_text(
        'version = 1\n[[package]]\nname = "torch"\nversion = "2.6.0+cu126"\n'
        'source = { registry = "https://download.pytorch.org/whl/cu126" }\n'
    )
    assert lock_request(kb, uv).torch == "2.6.0+cu126"
    plain = tmp_path / "requirements.txt"
    plain.write_text("torch==2.7.0\n")
    assert lock_request(kb, plain).torch == "2.7.0+cu126"  # the plain PyPI wheel's build


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("numpy\n", "pins torch 0 times"),
        ("torch==2.7.0\ntorch==2.6.0\n", "pins torch 2 times"),
        ("torch==banana\n", "pins torch 0 times"),
    ],
)
def test_a_lockfile_without_one_torch_pin_is_a_bad_request(tmp_path, capsys, text: str, said: str) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text(text)
    assert gpuenv_main("fleet", "compat", str(write_fleet(tmp_path / "f")), "--requirements", str(lock)) == 2
    assert said in capsys.readouterr().err


def test_an_image_is_checked_from_the_labels_build_image_puts_on_it(tmp_path) -> None:
    from gpuenv.render.dockerfile import render_image
    from gpuenv.render.options import ImageOptions
    from gpuenv.resolve.request import Request
    from gpuenv.resolve.service import resolve

    kb = load_kb(None)
    stack = resolve(kb, Request(torch=CU128, purpose="image"))
    labels = render_image(stack, ImageOptions(), kb.os_by_name[stack.os]).labels
    asked = image_request("train:2.7", ImageFacts(labels, "amd64"))
    assert resolve(kb, asked).build == "cu128" and asked.cpu_arch == "x86_64"
    with pytest.raises(Exception, match="no gpuenv labels"):
        image_request("ubuntu:24.04", ImageFacts({}, "amd64"))


def test_the_gpu_history_names_the_fleet(tmp_path, capsys) -> None:
    folder = write_fleet(tmp_path / "fleet")
    history = tmp_path / "history.sqlite"
    assert gpuenv_main("fleet", "report", str(folder), "--history", str(history), "--json") == 1
    capsys.readouterr()
    code, doc = compat(capsys, "--history", str(history), "--torch", CU128)
    assert code == 1 and states(doc)["v100-002"] == "no" and states(doc)["b200-001"] == "runs"
    (folder / "b200-001.json").unlink()
    assert "cannot be read" in compat(capsys, "--history", str(history), "--torch", CU128)[1]["hosts"][2]["reasons"][0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "nothing to check"),
        (("--torch", "2.7.0+cu128", "--stack", "x.json"), "--stack cannot be combined"),
        (("--torch", "9.9.9+cu128"), "unknown torch version"),
    ],
)
def test_bad_requests_exit_2_with_one_line(tmp_path, capsys, args: tuple[str, ...], said: str) -> None:
    assert gpuenv_main("fleet", "compat", str(write_fleet(tmp_path)), *args) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_no_fleet_is_a_bad_request(tmp_path, capsys) -> None:
    assert gpuenv_main("fleet", "compat", "--torch", CU128) == 2
    assert gpuenv_main("fleet", "compat", str(tmp_path), "--torch", CU128) == 2
    assert "no gpuenv verify report" in capsys.readouterr().err
