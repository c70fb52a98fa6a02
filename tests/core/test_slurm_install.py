"""The Slurm hooks set up and run as an operator meets them: `slurm install` puts the scripts in place,
a hook outside a cluster stops before verify runs, a hook says what it did in words, and no option of
any command lacks help text."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import click

from gpuenv.cli import COMMANDS
from gpuenv.slurm.service import HookResult
from tests.conftest import run_gpuenv

HOOKS = ("gpuenv-health-check", "gpuenv-prolog", "gpuenv-epilog")


def test_install_writes_the_three_scripts_and_prints_the_slurm_conf_lines(tmp_path: Path) -> None:
    done = run_gpuenv("slurm", "install", "--dest", str(tmp_path), "--reports-dir", "/srv/gpuenv")
    assert done.returncode == 0, done.stderr
    assert f"HealthCheckProgram={tmp_path}/gpuenv-health-check" in done.stdout.splitlines()
    for name in HOOKS:
        script = tmp_path / name
        assert stat.S_IMODE(script.stat().st_mode) == 0o755
        assert script.read_text().startswith("#!/bin/sh\nexec ")
        assert f"-q slurm {name.removeprefix('gpuenv-')} --reports-dir /srv/gpuenv" in script.read_text()
    assert "written: " in done.stderr
    again = run_gpuenv("slurm", "install", "--dest", str(tmp_path), "--reports-dir", "/srv/gpuenv")
    assert again.returncode == 0 and again.stderr.count("unchanged: ") == 3
    moved = run_gpuenv("slurm", "install", "--dest", str(tmp_path), "--reports-dir", "/var/log/gpuenv")
    assert moved.returncode == 0 and moved.stderr.count("updated: ") == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_install_never_replaces_a_file_gpuenv_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "gpuenv-prolog").write_text("#!/bin/sh\n/usr/local/sbin/site-prolog\n")
    done = run_gpuenv("slurm", "install", "--dest", str(tmp_path))
    assert done.returncode == 2
    assert "gpuenv-prolog exists and is not a gpuenv hook script" in done.stderr
    assert (tmp_path / "gpuenv-prolog").read_text() == "#!/bin/sh\n/usr/local/sbin/site-prolog\n"
    assert not (tmp_path / "gpuenv-health-check").exists()  # all or nothing


def fake_slurm(tmp_path: Path, ping: str) -> dict[str, str]:
    """scontrol and sinfo first on PATH; `scontrol ping` answers with `ping`'s script line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\ncase "$*" in ping) {ping};; esac\nexit 0\n')
    (bin_dir / "sinfo").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("scontrol", "sinfo"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURMD_NODENAME": ""}


def test_a_hook_without_a_reachable_slurm_stops_before_verify(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path, "echo 'Slurmctld(primary) at ctl is DOWN'; exit 1")
    started = time.monotonic()
    done = run_gpuenv("slurm", "health-check", "--node", "vm", env=env, timeout=60)
    assert done.returncode == 3, done.stderr
    message, hint = done.stderr.strip().splitlines()
    assert message == "gpuenv: error: Slurm is not reachable: scontrol ping: Slurmctld(primary) at ctl is DOWN"
    assert "scontrol ping" in hint and "gpuenv verify" in hint
    assert time.monotonic() - started < 10  # verify never ran


def test_without_scontrol_the_hook_says_so_with_a_hint(tmp_path: Path) -> None:
    done = run_gpuenv("slurm", "prolog", env={"PATH": str(tmp_path)}, timeout=60)
    assert done.returncode == 3
    assert "Slurm is not reachable: scontrol not found" in done.stderr and "hint:" in done.stderr


def test_the_hook_line_says_what_it_did_in_words() -> None:
    assert HookResult(0, "vm", "none", None, "certified", None).line() == "vm: nothing to do: certified"
    resumed = HookResult(0, "gpu01", "resumed", "gpuenv: x", "certified", None).line()
    assert resumed == "gpu01: resumed (gpuenv had drained it): certified"


def every_command() -> Iterator[tuple[str, click.Command]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, f"{path} {name}")
        else:
            yield path, command

    for name, entry in COMMANDS.items():
        yield from walk(entry.load(), name)


def test_no_option_of_any_command_lacks_help_text() -> None:
    missing = [
        f"{path} {'/'.join(p.opts)}"
        for path, command in every_command()
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert not missing, missing
    assert len(list(every_command())) > 15  # the walk reached the groups' commands
