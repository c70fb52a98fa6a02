"""Hostile and clumsy input files: each is exit 2 with the file and the offending key named, through
the real CLI, before anything is written or run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuenv

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
STACK = ("--os", "debian12", "--python", "3.11", "--torch", "2.13.0")


def bad_request(result: Any, *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.startswith("gpuenv: error: "), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def resolved_stack(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run_gpuenv("resolve", "--cuda", "12.4", "--json").stdout)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return data


# --- item 4: the driver branch ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--cuda", "13.0", "--driver-branch", "470"), "R470 cannot run CUDA 13.0"),
        (("--driver-branch", "580.1"), "invalid --driver-branch"),
        (("--driver-branch", "R5800"), "invalid --driver-branch"),
    ],
)
def test_a_driver_branch_that_cannot_run_the_stack_is_refused_before_writing(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    project = tmp_path / "p"
    bad_request(run_gpuenv("provision", "h1", *args, "--render-only", str(project)), needle)
    assert not project.exists()


def test_a_stack_file_with_a_bad_driver_branch_is_refused(tmp_path: Path) -> None:
    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(resolved_stack(driver_branch="..")))
    project = tmp_path / "p"
    bad_request(run_gpuenv("provision", "h1", "--stack", str(stack), "--render-only", str(project)), "driver_branch")
    assert not project.exists()


def test_the_default_and_a_newer_branch_render(tmp_path: Path) -> None:
    for i, extra in enumerate([(), ("--driver-branch", "R590")]):
        out = run_gpuenv("provision", "h1", "--cuda", "13.0", *extra, "--render-only", str(tmp_path / f"p{i}"))
        assert out.returncode == 0, out.stderr


# --- item 5: wheelhouse entries -----------------------------------------------------------------


def _wheelhouse(tmp_path: Path) -> Path:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "numpy-2.0.0-py3-none-any.whl").write_bytes(b"PK")
    (wheels / "torch-2.13.0-cp311-cp311-linux_x86_64.whl").symlink_to(secret)
    return wheels


def test_build_image_refuses_a_symlink_in_the_wheelhouse(tmp_path: Path) -> None:
    wheels = _wheelhouse(tmp_path)
    dest = tmp_path / "ctx"
    out = run_gpuenv(
        "build-image", *STACK, "--with", "none", "--wheelhouse", str(wheels), "--render-only", str(dest), env=NO_DOCKER
    )
    bad_request(out, "torch-2.13.0-cp311-cp311-linux_x86_64.whl", "is a symlink")
    assert not dest.exists()


def test_provision_refuses_a_symlink_in_the_wheelhouse(tmp_path: Path) -> None:
    wheels = _wheelhouse(tmp_path)
    project = tmp_path / "p"
    out = run_gpuenv("provision", "h1", *STACK, "--wheelhouse", str(wheels), "--render-only", str(project))
    bad_request(out, "is a symlink")
    assert not project.exists()


def test_the_hosts_copy_never_follows_controller_links() -> None:
    import yaml  # type: ignore[import-untyped]

    from gpuenv.resources import shipped_dir

    tasks = yaml.safe_load((shipped_dir("playbooks") / "roles/pytorch/tasks/wheelhouse.yml").read_text())
    copy = next(t for t in tasks if t["name"] == "Copy the wheelhouse to the host")
    assert copy["ansible.builtin.copy"]["local_follow"] is False


# --- item 8: every data file against its schema -------------------------------------------------


def _file(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _policy(**values: Any) -> dict[str, Any]:
    return {"schema": "gpuenv.nvml-policy/1", **values}


def _baselines(**values: Any) -> dict[str, Any]:
    shipped = json.loads((Path(__file__).parents[2] / "gpuenv/data/baselines.json").read_text())
    shipped.update(values)
    return shipped


@pytest.mark.parametrize(
    ("option", "data", "needle"),
    [
        ("--policy", _policy(xids="abc"), "xids: must be object"),
        ("--policy", _policy(xids={"79": "reboot"}), 'xids.79: "reboot" is not allowed here'),
        ("--policy", '{"schema": "gpuenv.nvml-policy/1", "temperature_margin_c": NaN}', "NaN"),
        ("--policy", _policy(rules={"temperature": {"severity": "loud"}}), "rules.temperature.severity"),
        ("--baseline", _baselines(fail_below=True), "fail_below: must be number"),
        ("--baseline", _baselines(matmul_tflops=[{"match": ["H100"], "dtype": "bf16", "tflops": "fast"}]), "tflops"),
        ("--policy", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_verify_data_files_are_checked_at_load(tmp_path: Path, option: str, data: Any, needle: str) -> None:
    path = _file(tmp_path, "data.json", data)
    out = run_gpuenv("verify", "--device", "cpu", "--check", "nvml", option, str(path))
    bad_request(out, str(path), needle)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"torch": 2}, "torch: must be string"),
        ({"base_images": []}, "base_images: must be object"),
        ({"python_source__packages": ["x>pwned"]}, "python_source.packages[0]"),
        ({"python_source__packages": "python3"}, "python_source.packages: must be array"),
        ({"warnings": ["\x1b[2J\x1b[31mowned"]}, "warnings[0]"),
        ({"driver_branch": ".."}, "driver_branch"),
    ],
)
def test_stack_files_are_checked_at_load(tmp_path: Path, changes: dict[str, Any], needle: str) -> None:
    path = _file(tmp_path, "stack.json", resolved_stack(**changes))
    bad_request(run_gpuenv("resolve", "--stack", str(path)), str(path), needle)
    dest = tmp_path / "ctx"
    bad_request(run_gpuenv("build-image", "--stack", str(path), "--render-only", str(dest), env=NO_DOCKER), needle)
    assert not dest.exists()


def test_deeply_nested_inputs_are_bad_requests(tmp_path: Path) -> None:
    deep_json = _file(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    bad_request(run_gpuenv("resolve", "--stack", str(deep_json)), "nested too deeply")
    bad_request(run_gpuenv("--data", str(deep_json), "resolve"), "nested too deeply")
    deep_toml = _file(tmp_path, "deep.toml", "a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    bad_request(run_gpuenv("build-image", "--spec", str(deep_toml), "--render-only", str(tmp_path / "c")), "TOML")


def test_spec_files_are_checked_at_load(tmp_path: Path) -> None:
    spec = _file(tmp_path, "s.toml", '[image]\ncudnn = "yes"\n')
    bad_request(run_gpuenv("build-image", "--spec", str(spec), "--render-only", str(tmp_path / "c")), "image.cudnn")
    bad_request(run_gpuenv("build-image", "--spec", "x" * 5000, "--render-only", str(tmp_path / "c")), "too long")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("resolve", "--stack", "/dev/zero"), "larger than 1 MiB"),
        (("--data", "/dev/zero", "resolve"), "is not a regular file"),
        (("verify", "--policy", "/dev/zero"), "is not a regular file"),
    ],
)
def test_dev_zero_is_refused_not_read_forever(args: tuple[str, ...], needle: str) -> None:
    bad_request(run_gpuenv(*args, timeout=60), "/dev/zero", needle)


@pytest.mark.parametrize("value", ["nan", "inf", "1e300"])
def test_verify_timeout_must_be_a_real_duration(value: str) -> None:
    bad_request(run_gpuenv("verify", "--device", "cpu", "--timeout", value), "--timeout")


def test_an_ascii_terminal_gets_the_matrix() -> None:
    out = run_gpuenv("matrix", env={"PYTHONIOENCODING": "ascii"})
    assert out.returncode == 0 and "13.0" in out.stdout, out.stderr


def test_the_shipped_schemas_are_json_schema_and_agree_with_jsonschema(tmp_path: Path) -> None:
    import jsonschema

    from gpuenv import schema

    samples = {
        "nvml-policy": [json.loads((Path(schema.__file__).parent / "data/nvml-policy.json").read_text())],
        "baselines": [_baselines(), _baselines(fail_below=True), _baselines(busbw="x")],
        "stack": [resolved_stack(), resolved_stack(torch=2), resolved_stack(python_source__packages=["a b"])],
        "spec": [{"image": {"cudnn": True}}, {"image": {"cudnn": "yes"}}, {"stack": {"torch": 2}}],
        "site-check": [
            {"name": "ib", "timeout": {"quick": 5, "deep": 60}, "levels": ["quick", "deep"], "needs": ["gpu"]},
            {"name": "IB", "timeout": 5},
            {"name": "ib", "timeout": 0},
            {"name": "ib", "timeout": {"fast": 5}},
            {"name": "ib", "timeout": 5, "levels": []},
        ],
        "site-result": [
            {"status": "pass", "metrics": {"bw": {"value": {"0": 1.5}, "unit": "GB/s", "better": "higher"}}},
            {"status": "ok"},
            {"status": "fail", "findings": [{"code": "nvml.ecc", "severity": "fail", "message": "x"}]},
            {"status": "pass", "metrics": {"bw": {"value": {"gpu0": 1}, "unit": "GB/s", "better": "higher"}}},
            {"status": "pass", "metrics": {"bw": {"value": True, "unit": "GB/s", "better": "higher"}}},
        ],
    }
    for name, documents in samples.items():
        jsonschema.Draft202012Validator.check_schema(schema.schema(name))
        for document in documents:
            theirs = jsonschema.Draft202012Validator(schema.schema(name)).is_valid(document)
            try:
                schema.check(document, name)
                ours = True
            except schema.SchemaViolation:
                ours = False
            assert ours == theirs, (name, document)
    assert os.path.isdir(Path(schema.__file__).parent / "data/schemas")


def test_every_stack_the_resolver_makes_passes_the_stack_schema() -> None:
    from gpuenv import schema
    from gpuenv.errors import BadRequest
    from gpuenv.kb import load_kb
    from gpuenv.resolve import Request
    from gpuenv.resolve.service import resolve

    kb = load_kb()
    checked = 0
    for release in kb.torch:
        for system in kb.os:
            try:
                stack = resolve(kb, Request(torch=release.version, os=system.name))
            except BadRequest:
                continue
            schema.check(stack.to_dict(), "stack")
            checked += 1
    assert checked > 50


# --- issue 28, item 11: launcher variables that disagree ----------------------------------------

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
TORCHRUN |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}
SRUN = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "localhost"}


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (TORCHRUN | {"WORLD_SIZE": "-4"}, "WORLD_SIZE=-4 is not a number of processes"),
        (TORCHRUN | {"RANK": "2"}, "RANK=2 is outside 0..1 (WORLD_SIZE=2)"),
        (TORCHRUN | {"RANK": "-1"}, "RANK=-1 is outside 0..1 (WORLD_SIZE=2)"),
        (TORCHRUN | {"LOCAL_RANK": "2"}, "LOCAL_RANK=2 is outside 0..1 (LOCAL_WORLD_SIZE=2)"),
        (SRUN | {"SLURM_PROCID": "2"}, "SLURM_PROCID=2 is outside 0..1 (SLURM_NTASKS=2)"),
        (SRUN | {"SLURM_NTASKS": "0"}, "SLURM_NTASKS=0 is not a number of processes"),
    ],
)
def test_launcher_variables_that_disagree_are_a_bad_request_before_any_rendezvous(
    env: dict[str, str], needle: str
) -> None:
    """WORLD_SIZE=-4 certified as a run on this node; a rank no peer expects waited out the rendezvous
    timeout and blamed the node. Both are a bad request, named, at once."""
    result = run_gpuenv("verify", "--check", "allreduce", "--device", "cpu", "--timeout", "60", env=env, timeout=60)
    bad_request(result, needle)
