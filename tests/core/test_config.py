"""The config file and the GPUENV_* variables, through the real CLI: lookup, precedence, errors, provenance."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from gpuenv import config
from gpuenv.cli import COMMANDS, config_options
from gpuenv.errors import BadRequest
from tests.conftest import run_gpuenv


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _resolved_os(*args: str, env: dict[str, str] | None = None) -> str:
    result = run_gpuenv(*args, env=env)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["os"])


def _one_error(result: subprocess.CompletedProcess[str]) -> str:
    """The error line of an exit-2 run: one line and a hint, never a traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("gpuenv: error: ") and lines[1].startswith("  hint: "), result.stderr
    assert len(lines) == 2, result.stderr
    return lines[0]


def test_each_source_beats_the_ones_below_it(tmp_path: Path) -> None:
    file = _write(tmp_path / "config.toml", '[resolve]\nos = "debian12"\njson = true\n')
    assert _resolved_os("resolve", "--json") == "ubuntu22.04"  # the default
    assert _resolved_os("--config", str(file), "resolve") == "debian12"  # json = true came from the file too
    env = {"GPUENV_RESOLVE_OS": "ubuntu24.04"}
    assert _resolved_os("--config", str(file), "resolve", env=env) == "ubuntu24.04"
    assert _resolved_os("--config", str(file), "resolve", "--os", "ubuntu20.04", env=env) == "ubuntu20.04"
    # a flag in the environment: GPUENV_RESOLVE_JSON=1 prints JSON without a file
    assert _resolved_os("resolve", env={"GPUENV_RESOLVE_JSON": "1"}) == "ubuntu22.04"


def _verify(group_args: list[str], env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "gpuenv", *group_args, "verify", *args, "--device", "cpu", "--check", "stack"]
    command.append("--json")
    return subprocess.Popen(command, env={**__import__("os").environ, **env}, stdout=subprocess.PIPE, text=True)


@pytest.mark.torch  # runs verify's stack check, which imports torch
def test_done_when_the_variable_and_the_flag_beat_the_files_level(tmp_path: Path) -> None:
    file = _write(tmp_path / "config.toml", '# the team\'s settings\n[verify]\nlevel = "deep"\n')
    env = {"GPUENV_VERIFY_LEVEL": "standard"}
    runs = {  # started together: each imports torch
        "env only": _verify([], env),
        "file and env": _verify(["--config", str(file)], env),
        "file, env and flag": _verify(["--config", str(file)], env, "--level", "quick"),
    }
    levels = {}
    for name, proc in runs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, (name, out[-2000:])
        report = json.loads(out)
        levels[name] = report["level"]
        assert [c["name"] for c in report["checks"]] == ["stack"]
    assert levels == {"env only": "standard", "file and env": "standard", "file, env and flag": "quick"}

    shown = run_gpuenv("--config", str(file), "config", "show", "--json", "verify", env=env)
    assert shown.returncode == 0, shown.stderr
    level = next(s for s in json.loads(shown.stdout)["settings"] if s["option"] == "level")
    assert level == {
        "command": "verify",
        "option": "level",
        "value": "standard",
        "source": "env",
        "origin": "GPUENV_VERIFY_LEVEL",
        "overrides": [{"source": "file", "origin": f"{file}:3", "value": "deep"}],
    }
    text = run_gpuenv("--config", str(file), "config", "show", "verify", "--level", "quick", env=env).stdout
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("level"))
    assert "'quick'" in line and "flag --level" in line
    assert "overrides env GPUENV_VERIFY_LEVEL = 'standard'" in line and f"file {file}:3 = 'deep'" in line


def test_config_show_names_every_source(tmp_path: Path) -> None:
    file = _write(tmp_path / "config.toml", '[provision]\nuser = "deploy"\nport = 2222\n')
    env = {"GPUENV_PROVISION_FORKS": "40"}
    result = run_gpuenv("--config", str(file), "config", "show", "--json", "provision", "--venv", "/opt/v", env=env)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["file"] == str(file) and doc["found_by"] == "--config"
    assert doc["precedence"] == ["flag", "env", "file", "default"]
    by_name = {s["option"]: s for s in doc["settings"]}
    assert (by_name["user"]["value"], by_name["user"]["origin"]) == ("deploy", f"{file}:2")
    assert (by_name["port"]["value"], by_name["port"]["origin"]) == (2222, f"{file}:3")
    assert (by_name["forks"]["value"], by_name["forks"]["source"]) == (40, "env")
    assert (by_name["venv"]["value"], by_name["venv"]["origin"]) == ("/opt/v", "--venv")
    assert (by_name["timeout"]["value"], by_name["timeout"]["source"]) == (14400, "default")
    # every command is listed when none is named; the config command itself has no settings
    everything = run_gpuenv("--config", str(file), "config", "show", "--json")
    commands = {s["command"] for s in json.loads(everything.stdout)["settings"]}
    assert {name.split()[0] for name in commands} == set(COMMANDS) - {"config"}
    assert {"kb refresh", "slurm health-check", "verify"} <= commands  # subcommands of groups by their full name


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ('[verify]\nlvl = "deep"\n', [":2: [verify] 'lvl' is not an option of gpuenv verify", "did you mean 'level'"]),
        ("[verify]\nlevel = 3\n", [":2: [verify] level: expected a string, got integer 3"]),
        ('[verify]\ncheck = "stack"\n', [":2: [verify] check: expected a list, got string"]),
        ('[verify]\ntimeout = "60"\n', [":2: [verify] timeout: expected a number, got string"]),
        ("[verify]\nimage = 12.10\n", [":2: [verify] image: expected a string (quote it"]),
        ('[verify]\nlevel = "ultra"\n', [":2: [verify] level: 'ultra' is not one of 'quick', 'standard', 'deep'"]),
        ("[verify]\nexpect-gpus = 0\n", [":2: [verify] expect-gpus: 0 is not in the range x>=1"]),
        ('[verfy]\nlevel = "deep"\n', [":1: [verfy] is not a gpuenv command", "did you mean 'verify'"]),
        ('level = "deep"\n', [":1: 'level' is outside any table"]),
        ('[verify]\nlevel = "deep"\n[verify\n', ["not valid TOML", "line 3"]),
        ("[prices]\nH100 = -2.5\n", [":2: [prices] H100: expected a positive number"]),
        ('[prices]\nH100 = "2.5"\n', [":2: [prices] H100: expected a positive number"]),
    ],
)
def test_a_bad_file_is_exit_2_naming_file_table_and_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    file = _write(tmp_path / "config.toml", text)
    result = run_gpuenv("--config", str(file), "verify", "--device", "cpu")
    assert str(file) in _one_error(result)
    for fragment in fragments:
        assert fragment in result.stderr


def test_a_hostile_value_is_refused_from_the_file_as_from_the_flag(tmp_path: Path) -> None:
    args = ("provision", "gpu01", "--os", "debian12", "--render-only", str(tmp_path / "out"))
    flag = _one_error(run_gpuenv(*args, "--user", "root;reboot"))
    file = _write(tmp_path / "config.toml", '[provision]\nuser = "root;reboot"\n')
    from_file = _one_error(run_gpuenv("--config", str(file), *args))
    from_env = _one_error(run_gpuenv(*args, env={"GPUENV_PROVISION_USER": "root;reboot"}))
    assert flag.endswith("invalid user: 'root;reboot'")
    assert from_file == f"gpuenv: error: {file}:2: [provision] user: invalid user: 'root;reboot'"
    assert from_env == "gpuenv: error: GPUENV_PROVISION_USER: invalid user: 'root;reboot'"
    assert not (tmp_path / "out").exists()


def test_secrets_stay_out_of_the_file_and_the_environment(tmp_path: Path) -> None:
    args = ("provision", "gpu01", "--os", "debian12", "--render-only")
    file = _write(tmp_path / "config.toml", "[provision]\nask-become-pass = true\n")
    line = _one_error(run_gpuenv("--config", str(file), *args, str(tmp_path / "a")))
    assert "[provision] ask-become-pass: an option that carries or asks for a secret" in line
    # The variable does not exist: no prompt (stdin is closed), the project is written.
    result = run_gpuenv(*args, str(tmp_path / "b"), env={"GPUENV_PROVISION_ASK_BECOME_PASS": "1"})
    assert result.returncode == 0, result.stderr
    assert "GPUENV_PROVISION_ASK_BECOME_PASS" not in run_gpuenv("provision", "--help").stdout
    # Only a file holding the password may be named, and only one nobody else can read.
    secret = _write(tmp_path / "become", "pw\n")
    secret.chmod(0o640)
    named = _write(tmp_path / "named.toml", f'[provision]\nbecome-password-file = "{secret}"\n')
    line = _one_error(run_gpuenv("--config", str(named), *args, str(tmp_path / "c")))
    assert "readable or writable by others (mode 0640)" in line
    secret.chmod(0o600)
    assert run_gpuenv("--config", str(named), *args, str(tmp_path / "c")).returncode == 0


def test_one_file_is_found_never_merged_and_no_config_ignores_all(tmp_path: Path) -> None:
    xdg = _write(tmp_path / "xdg" / "gpuenv" / "config.toml", '[resolve]\nos = "debian12"\njson = true\n')
    named = _write(tmp_path / "named.toml", '[resolve]\nos = "ubuntu24.04"\n')
    lookup = {"GPUENV_NO_CONFIG": "", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert run_gpuenv("config", "path", env=lookup).stdout.strip() == str(xdg)
    assert _resolved_os("resolve", env=lookup) == "debian12"
    both = {**lookup, "GPUENV_CONFIG": str(named)}
    assert run_gpuenv("config", "path", env=both).stdout.strip() == str(named)
    assert _resolved_os("resolve", "--json", env=both) == "ubuntu24.04"
    plain = run_gpuenv("resolve", env=both)  # the XDG file's json = true is not merged in
    assert plain.returncode == 0 and not plain.stdout.lstrip().startswith("{")
    assert _resolved_os("--config", str(xdg), "resolve", env=both) == "debian12"  # --config beats $GPUENV_CONFIG
    assert _resolved_os("--no-config", "resolve", "--json", env=both) == "ubuntu22.04"
    none = run_gpuenv("--no-config", "config", "path", env=both)
    assert none.returncode == 0 and none.stdout == "" and "no config file in use" in none.stderr
    assert "exclude each other" in _one_error(run_gpuenv("--config", str(xdg), "--no-config", "resolve"))
    missing = _one_error(run_gpuenv("resolve", env={**lookup, "GPUENV_CONFIG": str(tmp_path / "nope.toml")}))
    assert "(from $GPUENV_CONFIG) does not exist" in missing


def test_every_option_shows_its_variable_in_help() -> None:
    top = run_gpuenv("--help").stdout
    assert "GPUENV_DATA" in top and "GPUENV_NO_CONFIG" in top
    verify = run_gpuenv("verify", "--help").stdout
    for name in ("LEVEL", "CHECK", "DEVICE", "EXPECT_GPUS", "REPORT", "BASELINE", "TIMEOUT"):
        assert f"GPUENV_VERIFY_{name}" in verify
    provision = run_gpuenv("provision", "--help").stdout.replace("\n", " ")
    for name in ("USER", "PORT", "SSH_KEY", "BECOME_PASSWORD_FILE", "WHEELHOUSE", "INVENTORY", "DRY_RUN"):
        assert f"GPUENV_PROVISION_{name}" in provision.replace(" ", "")


def test_a_later_nested_command_gets_its_table_and_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fleet verify`-style commands: table [fleet.verify], variables GPUENV_FLEET_VERIFY_<OPTION>."""

    @click.command("verify")
    @click.option("--baseline-dir", default="none")
    @click.option("--forks", type=int, default=5)
    @click.option("--vault-password", help="a secret")
    def fleet_verify(baseline_dir: str, forks: int, vault_password: str | None) -> None:
        click.echo(f"{baseline_dir} {forks}")

    fleet = click.Group("fleet", commands={"verify": fleet_verify})
    root = click.Group("gpuenv", commands={"fleet": fleet})
    config_options.prepare_options(fleet, ("fleet",))
    assert fleet_verify.params[0].envvar == "GPUENV_FLEET_VERIFY_BASELINE_DIR"
    assert fleet_verify.params[2].envvar is None  # a secret gets no variable
    file = _write(tmp_path / "c.toml", '[fleet.verify]\nbaseline-dir = "/srv/b"\nforks = 7\n')
    loaded = config.read(file, "--config")
    ctx = click.Context(root, info_name="gpuenv")
    defaults = config_options.default_map(loaded, root, ctx, ["fleet"])
    assert defaults == {"fleet": {"verify": {"baseline_dir": "/srv/b", "forks": 7}}}
    monkeypatch.setenv("GPUENV_FLEET_VERIFY_FORKS", "9")
    root.main(["fleet", "verify"], default_map=defaults, standalone_mode=False)
    assert capsys.readouterr().out == "/srv/b 9\n"  # the file's baseline-dir, the variable's forks
    bad = _write(tmp_path / "bad.toml", '[fleet.verify]\nvault-password = "x"\n')
    with pytest.raises(BadRequest, match=r"bad.toml:2: \[fleet.verify\] vault-password"):
        config_options.default_map(config.read(bad, "--config"), root, ctx, ["fleet"])


def test_key_lines_follow_tables_quoted_and_dotted_keys() -> None:
    text = (
        "# comment\n"
        "[verify]\n"
        'level = "deep"  # why\n'
        "check = [\n"
        '  "stack",\n'
        "]\n"
        "[ fleet . verify ]\n"
        '"baseline-dir" = "/b"\n'
        "provision.user = 'root'\n"
    )
    lines = config.key_lines(text)
    assert lines[("verify",)] == 2 and lines[("verify", "level")] == 3 and lines[("verify", "check")] == 4
    assert lines[("fleet", "verify", "baseline-dir")] == 8
    assert lines[("fleet", "verify", "provision", "user")] == 9


def test_lookup_order_without_flag_or_variable(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "relative/ignored"}
    assert config.candidates(env)[0][1] == tmp_path / "home" / ".config" / "gpuenv" / "config.toml"
    assert config.candidates(env)[1][1] == Path("/etc/gpuenv/config.toml")
    home_file = _write(tmp_path / "home" / ".config" / "gpuenv" / "config.toml", "")
    assert config.locate(None, env) == (home_file, "user")
    assert config.locate(None, {**env, "GPUENV_CONFIG": str(home_file)}) == (home_file, "$GPUENV_CONFIG")


def test_each_command_checks_its_own_table_and_config_show_checks_all(tmp_path: Path) -> None:
    file = _write(tmp_path / "config.toml", "[resolve]\ncuda = 12.10\n\n[matrix]\njson = true\n")
    assert run_gpuenv("--config", str(file), "matrix").stdout.lstrip().startswith("{")  # [resolve] not read
    assert ":2: [resolve] cuda: expected a string" in _one_error(run_gpuenv("--config", str(file), "resolve"))
    assert ":2: [resolve] cuda" in _one_error(run_gpuenv("--config", str(file), "config", "show"))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309"])
def test_a_float_that_is_not_a_finite_number_is_refused_naming_its_source(tmp_path: Path, value: str) -> None:
    """--z nan would switch outlier detection off: from a flag, a variable or the file it is exit 2."""
    report = ["fleet", "report", str(tmp_path / "none.json")]
    for args, env, name in (
        (["--z", value], {}, "--z"),
        ([], {"GPUENV_FLEET_REPORT_Z": value}, "GPUENV_FLEET_REPORT_Z"),
        (["--min-deviation", value], {}, "--min-deviation"),  # a range: nan lies within no bounds
    ):
        error = _one_error(run_gpuenv(*report, *args, env=env))
        assert f"invalid {name}: '{value}' is not a finite number" in error
    file = _write(tmp_path / "config.toml", f"[fleet.report]\nmin-hosts = 3\nz = {value}\n")
    error = _one_error(run_gpuenv("--config", str(file), *report))
    assert "config.toml:3: [fleet.report] z: expected a finite number, got float" in error


def test_config_is_free_of_click() -> None:
    """The CLI converts between Click's options and the settings; gpuenv.config reads the file alone."""
    tree = ast.parse(Path(config.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] == "click" or m.startswith("gpuenv.cli")}
