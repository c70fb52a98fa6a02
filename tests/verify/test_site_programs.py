"""Site checks from a checks directory, through the CLI: programs that pass, warn and fail by the
Nagios codes or a JSON answer, hang (killed at their limit, nothing left running), crash or answer
garbage; a directory or program root should not trust is refused, saying why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpuenv.resources import data_file
from gpuenv.verify.site import programs
from gpuenv.verify.site.running import run_program
from tests.conftest import REPO, run_gpuenv
from tests.verify.conftest import scenario_env

REPORT_SCHEMA = json.loads(data_file("report.schema.json").read_text())


def program(name: str, body: str, *, timeout: float = 10, header: str = "") -> str:
    """A shell check declaring itself in its header."""
    return f'#!/bin/sh\n# gpuenv-check: name = "{name}"\n# gpuenv-check: timeout = {timeout:g}\n{header}{body}\n'


def checks_dir(root: Path, files: dict[str, str], *, mode: int = 0o755) -> Path:
    folder = root / "checks.d"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o644 if name.endswith(".toml") else 0o755)
    folder.chmod(mode)
    return folder


def verify(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = run_gpuenv("verify", "--device", "cpu", "--json", *args, env=env)
    return out, json.loads(out.stdout) if out.stdout.strip() else {}


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def valid_report(report: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(report, REPORT_SCHEMA)


NAGIOS = {
    "ok": program("ok", 'echo "OK - /scratch mounted | free=9TB"'),
    "warning": program("warning", 'echo "WARNING - /scratch 91% full"; exit 1'),
    "critical": program("critical", 'echo "CRITICAL - /scratch not mounted"; exit 2'),
    "unknown": program("unknown", 'echo "UNKNOWN - mount table unreadable" ; echo "no /proc/mounts" >&2; exit 3'),
}
ANSWER = {
    "status": "pass",
    "summary": "2 ports up",
    "findings": [
        {"code": "port-slow", "severity": "warn", "message": "mlx5_1 port 1 at 100 Gb/s", "action": "monitor"},
        {"code": "port-down", "severity": "fail", "message": "mlx5_0 port 1 is down", "remediation": "reseat it"},
    ],
    "metrics": {"link_gbps": {"value": 400, "unit": "Gb/s", "better": "higher"}},
}


def test_programs_pass_warn_and_fail_by_the_nagios_codes_or_their_json_answer(tmp_path: Path) -> None:
    files = {**NAGIOS, "ib": answering("ib", ANSWER, 2)}
    folder = checks_dir(tmp_path, files)
    names = ("ok", "warning", "critical", "unknown", "ib")
    out, report = verify("--checks-dir", str(folder), *(f"--check=site.{n}" for n in names))
    assert out.returncode == 1, out.stderr
    valid_report(report)
    checks = checks_of(report)
    statuses = {name: checks[f"site.{name}"]["status"] for name in names}
    assert statuses == {"ok": "pass", "warning": "warn", "critical": "fail", "unknown": "error", "ib": "fail"}
    assert checks["site.ok"]["summary"] == "OK - /scratch mounted"  # the perfdata after | is not the summary
    assert checks["site.unknown"]["detail"]["stderr_tail"].strip() == "no /proc/mounts"
    ib = checks["site.ib"]
    assert [f["code"] for f in ib["findings"]] == ["site.ib.port-slow", "site.ib.port-down"]
    assert ib["summary"] == "mlx5_0 port 1 is down"  # its status was raised by a finding: the finding says why
    assert ib["metrics"] == {"link_gbps": 400}
    assert ib["figures"] == {"link_gbps": {"unit": "Gb/s", "better": "higher", "per_gpu": False}}
    assert ib["detail"]["origin"] == f"program {folder / 'ib'}"
    assert report["verdict"]["summary"].startswith("not certified (CPU only): site.critical, site.ib")


def test_a_hung_program_is_killed_at_its_limit_with_everything_it_started(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    hang = program("hang", f"export SITE_MARK={mark}\nsleep 600 &\nsh -c 'sleep 600' &\nsleep 600", timeout=2)
    folder = checks_dir(tmp_path, {"hang": hang})
    started = time.monotonic()
    out, report = verify("--checks-dir", str(folder), "--check", "site.hang")
    assert time.monotonic() - started < 30
    assert out.returncode == 1, out.stderr
    check = checks_of(report)["site.hang"]
    assert check["status"] == "timeout"
    assert "ran past its 2 s limit; killed with every process it started" in check["summary"]
    assert check["detail"]["limit_s"] == 2
    assert marked(f"SITE_MARK={mark}") == []


def marked(entry: str) -> list[int]:
    """Processes whose environment holds this entry."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def answering(name: str, answer: dict[str, Any], code: int = 0) -> str:
    """A check that prints this JSON answer and exits with this code."""
    return program(name, f"cat <<'EOF'\n{json.dumps(answer)}\nEOF\nexit {code}")


POSING = {"status": "fail", "findings": [{"code": "nvml.ecc", "severity": "fail", "message": "x"}]}
WRONG_GPU = {"status": "pass", "metrics": {"bw": {"value": {"3": 1}, "unit": "GB/s", "better": "higher"}}}
BAD = {
    "segv": (program("segv", "echo dying >&2\nkill -SEGV $$"), "crash", "died by SIGSEGV"),
    "garbage": (program("garbage", "echo '{\"status\": \"pass\", oops'\necho 'it broke' >&2"), "error", "it broke"),
    "posing": (answering("posing", POSING, 2), "error", "findings[0].code"),
    "wrong-gpu": (answering("wrong-gpu", WRONG_GPU), "error", "names GPU 3, which this run does not check"),
    "liar": (answering("liar", {"status": "pass"}, 2), "error", "exited 2 (CRITICAL) but its JSON says pass"),
    "seven": (program("seven", "echo boom >&2; exit 7"), "error", "exited 7, not a Nagios code"),
    "no-shebang": (program("no-shebang", "")[len("#!/bin/sh\n") :], "error", "could not be started"),
}


def test_a_crashing_program_is_crash_and_an_answer_gpuenv_cannot_read_an_error(tmp_path: Path) -> None:
    folder = checks_dir(tmp_path, {name: text for name, (text, _, _) in BAD.items()})
    out, report = verify("--checks-dir", str(folder), *(f"--check=site.{name}" for name in BAD))
    assert out.returncode == 1, out.stderr
    valid_report(report)
    checks = checks_of(report)
    for name, (_, status, says) in BAD.items():
        check = checks[f"site.{name}"]
        assert check["status"] == status, (name, check)
        assert says in check["summary"] + check["detail"].get("stderr_tail", ""), (name, check)
    assert checks["site.segv"]["detail"]["stderr_tail"].strip() == "dying"


def test_a_program_runs_from_its_checked_file_with_a_clean_environment(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    body = f'env > {seen}/env\npwd > {seen}/pwd\necho "OK - $0 at $GPUENV_LEVEL"'
    folder = checks_dir(tmp_path, {"envcheck": program("envcheck", body, timeout=7)})
    seen.mkdir()
    out, report = verify("--checks-dir", str(folder), "--check", "site.envcheck", env={"CUDA_VISIBLE_DEVICES": "1"})
    assert out.returncode == 0, out.stderr
    assert checks_of(report)["site.envcheck"]["summary"].startswith("OK - /proc/self/fd/")  # the descriptor checked
    env = dict(line.split("=", 1) for line in (seen / "env").read_text().splitlines() if "=" in line)
    work = (seen / "pwd").read_text().strip()
    assert env["GPUENV_WORK_DIR"] == work == env["HOME"] == env["TMPDIR"]
    assert not Path(work).exists()  # removed after the check
    told = {k: env[k] for k in env if k.startswith("GPUENV_") and k != "GPUENV_WORK_DIR"}
    assert told == {
        "GPUENV_API": "1",
        "GPUENV_CHECK": "site.envcheck",
        "GPUENV_CHECK_FILE": str(folder / "envcheck"),
        "GPUENV_LEVEL": "quick",
        "GPUENV_DEVICE": "cpu",
        "GPUENV_GPUS": "",
        "GPUENV_GPU_UUIDS": "",
        "GPUENV_TIMEOUT": "7",
    }
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # the GPUs the job or --gpus gave, passed on
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert not {"GPUENV_NO_CONFIG", "XDG_STATE_HOME", "VIRTUAL_ENV", "PYTHONPATH"} & set(env)  # nothing of gpuenv's


def test_a_binary_declares_itself_in_a_side_toml(tmp_path: Path) -> None:
    folder = checks_dir(tmp_path, {"true-bin.toml": 'name = "true-bin"\ntimeout = 5\nlevels = ["quick"]\n'})
    shutil.copy("/bin/true", folder / "true-bin")
    (folder / "true-bin").chmod(0o755)
    out, report = verify("--checks-dir", str(folder), "--check", "site.true-bin")
    assert out.returncode == 0, out.stderr
    assert checks_of(report)["site.true-bin"]["summary"] == "exit 0 (OK)"


def test_levels_limits_and_needs_are_the_checks_own(tmp_path: Path) -> None:
    deep = program("deep-only", "exit 0", header='# gpuenv-check: levels = ["deep"]\n')
    per_level = '# gpuenv-check: name = "per-level"\n# gpuenv-check: timeout = {quick = 3, standard = 9, deep = 27}\n'
    gpu = program("gpu-only", "exit 2", header='# gpuenv-check: needs = ["gpu"]\n')
    folder = checks_dir(tmp_path, {"deep-only": deep, "per-level": "#!/bin/sh\n" + per_level, "gpu-only": gpu})
    out = run_gpuenv("verify", "--list-checks", "--json", "--checks-dir", str(folder))
    assert out.returncode == 0, out.stderr
    levels = {lv["level"]: {c["name"]: c for c in lv["checks"]} for lv in json.loads(out.stdout)["levels"]}
    assert "site.deep-only" not in levels["quick"] and "site.deep-only" in levels["deep"]
    assert [levels[lv]["site.per-level"]["limit_s"] for lv in ("quick", "standard", "deep")] == [3, 9, 27]
    assert levels["quick"]["site.per-level"]["origin"] == f"program {folder / 'per-level'}"
    assert levels["quick"]["nvml"]["origin"] == "gpuenv"
    out, report = verify("--checks-dir", str(folder), "--check", "site.gpu-only")
    check = checks_of(report)["site.gpu-only"]
    assert (check["status"], out.returncode) == ("skip", 3)  # nothing judged: could not run, never certified
    assert check["summary"].startswith("needs GPUs; this run is CPU only")


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("world-writable folder", "may be written by others (mode 0777): gpuenv runs nothing from it"),
        ("group-writable program", "may be written by others (mode 0775): gpuenv runs nothing from it"),
        ("another user's program", "belongs to another user (uid 65534"),
        ("symlinked program", "is a symlink (gpuenv follows none here)"),
        ("symlinked folder", "is a symlink (gpuenv follows none here)"),
        ("program not executable", "is not executable (chmod 755 it)"),
        ("a folder inside", "is a folder"),
        ("no declaration", "declares nothing"),
        ("declared twice", "declares itself twice"),
        ("side file alone", "stray.toml declares no program of the folder"),
        ("no time limit", "timeout: is missing"),
        ("a name with a dot", "name: "),
        ("a newer API", "written for site check API 2; this gpuenv speaks 1"),
        ("two of a name", "two site checks are named site.twin"),
    ],
)
def test_what_root_should_not_trust_or_cannot_read_is_refused_with_the_reason(
    tmp_path: Path, layout: str, says: str
) -> None:
    require_root()
    folder = checks_dir(tmp_path, {"ok": program("ok", "exit 0")})
    given = folder
    if layout == "world-writable folder":
        folder.chmod(0o777)
    elif layout == "group-writable program":
        (folder / "ok").chmod(0o775)
    elif layout == "another user's program":
        os.chown(folder / "ok", 65534, 65534)
    elif layout == "symlinked program":
        (tmp_path / "elsewhere").write_text(program("elsewhere", "exit 0"))
        (tmp_path / "elsewhere").chmod(0o755)
        (folder / "link").symlink_to(tmp_path / "elsewhere")
    elif layout == "symlinked folder":
        given = tmp_path / "linked.d"
        given.symlink_to(folder)
    elif layout == "program not executable":
        (folder / "ok").chmod(0o644)
    elif layout == "a folder inside":
        (folder / "sub").mkdir()
    else:
        (folder / "new").write_text(DECLARATIONS[layout][0])
        (folder / "new").chmod(0o755)
        extra = DECLARATIONS[layout][1]
        if extra:
            (folder / extra).write_text(DECLARATIONS[layout][2])
            (folder / extra).chmod(0o644 if extra.endswith(".toml") else 0o755)
    out = run_gpuenv("verify", "--device", "cpu", "--checks-dir", str(given), "--check", "site.ok")
    assert out.returncode == 2, out.stderr
    assert says in out.stderr, out.stderr
    assert out.stderr.count("\n") <= 2 and "Traceback" not in out.stderr  # one line and a hint


DECLARATIONS = {
    "no declaration": ("#!/bin/sh\nexit 0\n", None, None),
    "declared twice": (program("new", "exit 0"), "new.toml", 'name = "new"\ntimeout = 3\n'),
    "side file alone": (program("new", "exit 0"), "stray.toml", 'name = "stray"\ntimeout = 3\n'),
    "no time limit": ('#!/bin/sh\n# gpuenv-check: name = "new"\n', None, None),
    "a name with a dot": (program("nv.ml", "exit 0"), None, None),
    "a newer API": (program("new", "exit 0", header="# gpuenv-check: api = 2\n"), None, None),
    "two of a name": (program("twin", "exit 0"), "twin2", program("twin", "exit 0")),
}


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the ownership cases chown a file to another user: root only")


def test_a_program_replaced_after_it_was_read_is_not_run(tmp_path: Path) -> None:
    folder = checks_dir(tmp_path, {"swap": program("swap", "exit 0")})
    (spec,) = programs.discover(folder)
    (folder / "swap.new").write_text(program("swap", "exit 2"))
    (folder / "swap.new").chmod(0o755)
    os.replace(folder / "swap.new", folder / "swap")
    with open(os.devnull, "w+b") as stderr:
        result = run_program(spec, limit=5, stderr=stderr, tail=lambda _: "", environ=lambda _: {}, gpus=())
    assert result.status == "error"
    assert result.summary.endswith("was replaced since it was read: gpuenv runs nothing from it")


def test_check_accepts_a_site_check_only_where_it_is_enabled(tmp_path: Path) -> None:
    out = run_gpuenv("verify", "--device", "cpu", "--check", "site.ok")
    assert out.returncode == 2 and "--check site.ok: no such site check is enabled here (enabled: none)" in out.stderr
    folder = checks_dir(tmp_path, {"ok": program("ok", "exit 0")})
    out = run_gpuenv("verify", "--device", "cpu", "--checks-dir", str(folder), "--check", "site.nope")
    assert out.returncode == 2 and "(enabled: site.ok)" in out.stderr
    out = run_gpuenv("verify", "--check", "site.Not_A_Name")
    assert out.returncode == 2 and "invalid --check site.Not_A_Name" in out.stderr
    out = run_gpuenv("verify", "--checks-dir", str(folder), "--check", "site.ok", "--image", "pytorch:2")
    assert out.returncode == 2 and "site checks run on this node, not in --image" in out.stderr


def test_nothing_is_scanned_where_no_site_check_can_run() -> None:
    """A broken checks directory in the settings stops no command that runs none (and --help reads nothing)."""
    env = {"GPUENV_VERIFY_CHECKS_DIR": "/nonexistent/checks.d", "GPUENV_VERIFY_ALL_PLUGINS": "1"}
    for args in (("--help",), ("verify", "--help"), ("verify", "--check", "nvml", "--passive")):
        out = run_gpuenv(*args, env=env)
        assert "checks.d" not in out.stderr and "plugin" not in out.stderr.lower(), (args, out.stderr)
    probe = "import sys; from gpuenv.cli import main; main(['verify', '--check', 'nvml', '--passive'])"
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True, env={**os.environ, **env}
    )
    assert "gpuenv.verify.site" not in out.stderr and "gpuenv.sitecheck" not in out.stderr
    out = run_gpuenv("verify", "--device", "cpu", "--check", "site.x", env=env)
    assert out.returncode == 2 and "--checks-dir /nonexistent/checks.d cannot be read" in out.stderr


def test_on_a_gpu_node_gpus_are_named_by_nvml_index_and_figures_meet_their_baseline(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """Over the fake NVML (8 H100s, the job given GPUs 2 and 5): the program is told the GPUs by NVML
    index, the report keys them by CUDA index with their UUIDs, and a learned baseline judges a figure."""
    answer = {
        "status": "pass",
        "findings": [{"code": "port-flaps", "severity": "info", "message": "port flapped once", "gpu": 5}],
        "metrics": {
            "port_gbps": {"value": {"2": 392, "5": 120}, "unit": "Gb/s", "better": "higher"},
            "latency_us": {"value": 2.1, "unit": "us", "better": "lower"},
        },
    }
    seen = tmp_path / "gpus"
    body = f"echo \"$GPUENV_GPUS $GPUENV_GPU_UUIDS\" > {seen}\ncat <<'EOF'\n{json.dumps(answer)}\nEOF"
    folder = checks_dir(tmp_path, {"ib": program("ib", body)})
    rows = [("site.ib.port_gbps", 390), ("site.ib.latency_us", 2.0)]
    baselines = {
        "schema": "gpuenv.baselines/2", "fail_below": 0.75, "warn_below": 0.9, "busbw": [], "matmul_tflops": [],
        "figures": [{"gpu": "H100", "match": ["H100"], "figure": f, "value": v} for f, v in rows],
    }  # fmt: skip
    (tmp_path / "baselines.json").write_text(json.dumps(baselines))
    env = {**scenario_env(fake_nvml_dir, "healthy-8xh100"), "CUDA_VISIBLE_DEVICES": "2,5"}
    args = ("--checks-dir", str(folder), "--check", "site.ib", "--baseline", str(tmp_path / "baselines.json"))
    out = run_gpuenv("verify", "--json", *args, env=env)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    valid_report(report)
    check = checks_of(report)["site.ib"]
    uuids = [g["uuid"] for g in report["host"]["gpus"]]
    assert seen.read_text().split() == ["2,5", ",".join(uuids)]
    assert check["metrics"]["port_gbps"] == {"0": 392, "1": 120}  # CUDA indices, as every per-GPU figure
    assert check["findings"][0]["gpu"] == {
        "index": 1,
        "uuid": uuids[1],
        "pci_bus_id": report["host"]["gpus"][1]["pci_bus_id"],
    }
    (low,) = [f for f in check["findings"] if f["code"] == "verify.site-figure-below-baseline"]
    assert (
        low["message"].startswith(f"GPU 1 ({uuids[1]}")
        and "site.ib.port_gbps 120 Gb/s vs 390 expected" in low["message"]
    )
    assert check["status"] == "fail" and check["summary"] == low["message"]
    assert not [f for f in report["checks"][0]["findings"] if f["code"] == "verify.option-unused"]


def test_the_documented_example_programs_run_as_documented(fake_nvml_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "checks.d"
    shutil.copytree(REPO / "docs" / "examples" / "checks.d", folder)
    folder.chmod(0o755)
    env = scenario_env(fake_nvml_dir, "healthy-8xh100")  # a GPU node: ib-ports needs GPUs
    args = ("--checks-dir", str(folder), "--check", "site.ib-ports", "--check", "site.scratch-mounted")
    out = run_gpuenv("verify", "--json", *args, env=env)
    report = json.loads(out.stdout)
    valid_report(report)
    checks = checks_of(report)
    mounted = subprocess.run(["mountpoint", "-q", "/scratch"], check=False).returncode == 0
    assert checks["site.scratch-mounted"]["status"] == ("pass" if mounted else "fail")
    ports = checks["site.ib-ports"]
    assert ports["status"] in ("pass", "fail") and ports["figures"]["ports_down"]["better"] == "lower"
    assert (ports["status"] == "fail") == (ports["metrics"]["ports_down"] > 0)


def test_a_program_dies_with_gpuenv_when_gpuenv_is_killed(tmp_path: Path) -> None:
    """SIGKILL reaches no child: the helper sees gpuenv go and kills the program's whole group."""
    mark = uuid.uuid4().hex
    started = tmp_path / "started"
    body = f"export SITE_MARK={mark}\nsleep 600 &\ntouch {started}\nsleep 600"
    folder = checks_dir(tmp_path, {"hang": program("hang", body, timeout=300)})
    command = [sys.executable, "-m", "gpuenv", "verify", "--device", "cpu", "--checks-dir", str(folder)]
    gpuenv = subprocess.Popen([*command, "--check", "site.hang"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60  # both sleeps: the shell starts the second just after the touch
    while (not started.exists() or len(marked(f"SITE_MARK={mark}")) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists() and len(marked(f"SITE_MARK={mark}")) == 2
    gpuenv.kill()
    gpuenv.wait(timeout=10)
    deadline = time.monotonic() + 15
    while marked(f"SITE_MARK={mark}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(f"SITE_MARK={mark}") == []
