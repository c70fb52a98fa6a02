"""The config file and the environment variables: settings a fleet sets once.

Click applies the precedence, flag > environment > config file > default, for every option of every
command: the file becomes the context's `default_map`, and each option gets the environment variable
GPUENV_<COMMAND>_<OPTION>, named after its command path and its long name. This module finds, reads and
checks the file (its tables, the kind of each value, the [prices] table) and presents the settings;
it knows nothing of Click: gpuenv.cli.config_options holds each value against its option's own type
and validation callback, so a value in the file is refused exactly like the same value on the command
line, and says where each effective value came from.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.schema import parse_toml

ENV_PREFIX = "GPUENV"
CONFIG_ENV = "GPUENV_CONFIG"
SYSTEM_FILE = Path("/etc/gpuenv/config.toml")
RESERVED_TABLES = ("prices",)  # GPU prices, {name: positive number}; read by later commands
UNCONFIGURED_COMMANDS = ("config",)  # the config command itself takes nothing from the file
MAX_BYTES = 1 << 20
PRECEDENCE = ("flag", "env", "file", "default")
# patterns compiled at first use (through re's cache): most runs read no config file
_SECRET = r"(^|-)(pass|password|passphrase|secret|token)($|-)"


@dataclass(frozen=True)
class ConfigFile:
    """A parsed config file: its tables, and the line each key is on (for messages and `config show`)."""

    path: Path
    found_by: str
    data: Mapping[str, Any]
    lines: Mapping[tuple[str, ...], int]

    def where(self, keys: tuple[str, ...]) -> str:
        line = self.lines.get(keys)
        return f"{self.path}:{line}" if line else str(self.path)


@dataclass(frozen=True)
class Setting:
    """One effective option value and where it came from; `overrides` lists the lower sources that lost."""

    command: str
    option: str
    value: Any
    source: str
    origin: str | None
    overrides: tuple[tuple[str, str, Any], ...] = ()


def history_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the GPU history is kept by default: $XDG_STATE_HOME/gpuenv/history.sqlite, else
    ~/.local/state/gpuenv/history.sqlite."""
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "gpuenv" / "history.sqlite"


def candidates(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """The places looked at when neither --config nor $GPUENV_CONFIG names a file, in order."""
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path(env.get("HOME", "~")).expanduser() / ".config"
    return [("user", base / "gpuenv" / "config.toml"), ("system", SYSTEM_FILE)]


def locate(explicit: Path | None, env: Mapping[str, str]) -> tuple[Path, str] | None:
    """The one file in use: --config, else $GPUENV_CONFIG, else the first that exists; never merged."""
    named = [("--config", explicit), (f"${CONFIG_ENV}", Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else None)]
    for found_by, path in named:
        if path is not None:
            if not path.is_file():
                raise BadRequest(
                    f"config file {path} (from {found_by}) does not exist",
                    hint="give an existing TOML file, or --no-config to read none",
                )
            return path, found_by
    return next(((path, found_by) for found_by, path in candidates(env) if path.is_file()), None)


def load(explicit: Path | None, env: Mapping[str, str]) -> ConfigFile | None:
    found = locate(explicit, env)
    return None if found is None else read(*found)


def read(path: Path, found_by: str) -> ConfigFile:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise BadRequest(f"config file {path} is larger than {MAX_BYTES} bytes", hint="is it the right file?")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read config file {path}: {exc}", hint="give a readable UTF-8 TOML file") from exc
    try:
        data = parse_toml(text)
    except ValueError as exc:
        raise BadRequest(
            f"{path.resolve()}: not valid TOML: {exc}", hint="see docs/configuration.md for the format"
        ) from exc
    return ConfigFile(path=path.resolve(), found_by=found_by, data=data, lines=key_lines(text))


_TABLE = r"\[\s*([^\[\]]+?)\s*\]\s*(#.*)?"
_KEY = r"((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="


def _dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'", text)
    return tuple(p[1:-1] if p[0] in "\"'" else p for p in parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of each table header and key, by its full dotted path (the first occurrence wins)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.fullmatch(_TABLE, stripped)
        if header:
            table = _dotted(header.group(1))
            lines.setdefault(table, number)
            continue
        key = re.match(_KEY, stripped)
        if key:
            lines.setdefault(table + _dotted(key.group(1)), number)
    return lines


def env_name(path: tuple[str, ...], option: str) -> str:
    return "_".join((ENV_PREFIX, *path, option)).upper().replace("-", "_")


def is_secret_name(name: str) -> bool:
    """An option named for a secret (a password, a token): only ever given on the command line.
    A *-file option names a file holding the secret: that may be set (the file's mode is checked where read)."""
    return bool(re.search(_SECRET, name)) and not name.endswith("-file")


def check_tables(config: ConfigFile, known: list[str]) -> None:
    """Every top-level name of the file is a command with options (or a reserved table)."""
    for key, value in config.data.items():
        if key in RESERVED_TABLES:
            check_prices(config, value)
        elif not isinstance(value, dict):
            raise BadRequest(
                f"{config.where((key,))}: {key!r} is outside any table",
                hint='put options in their command\'s table, e.g. [verify] level = "standard"',
            )
        elif key not in known:
            raise BadRequest(
                f"{config.where((key,))}: [{key}] is not a gpuenv command with options",
                hint=suggest(key, [*known, *RESERVED_TABLES], "tables"),
            )


def table_data(config: ConfigFile, path: tuple[str, ...]) -> Mapping[str, Any]:
    data: Any = config.data
    for key in path:
        data = data[key]
    return data  # type: ignore[no-any-return]


def file_key(config: ConfigFile | None, path: tuple[str, ...], names: list[str]) -> str | None:
    """The first of an option's names under which the file sets it in the table at path, if any."""
    data: Any = config.data if config else {}
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return next((n for n in names if isinstance(data, dict) and n in data), None)


def expand_home(value: Any) -> Any:
    """A leading ~ in a file's path value means the home folder, as it would on a command line."""
    if isinstance(value, list):
        return [expand_home(v) for v in value]
    return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value


# What an option takes, as the file must spell it: "string" also takes a whole number (port = 22) but
# not a float (cuda = 12.10 would read 12.1); "text" is a string only (choices, paths).
Kind = Literal["integer", "boolean", "number", "string", "text"]
_WANT = {
    "integer": "an integer",
    "boolean": "true or false",
    "number": "a number",
    "string": 'a string (quote it: "...")',
    "text": "a string",
}


def value_problem(kind: Kind, value: Any, *, many: bool) -> str | None:
    """What is wrong with a value from the file for an option of this kind (a list when many), or None."""
    if many:
        if not isinstance(value, list):
            return f"expected a list, got {_toml_type(value)}"
        return next((p for p in (value_problem(kind, v, many=False) for v in value) if p), None)
    if _is_kind(kind, value):
        return None
    finite = "a finite number" if kind == "number" and isinstance(value, float) else _WANT[kind]
    return f"expected {finite}, got {_toml_type(value)} {value!r}"


def _is_kind(kind: Kind, value: Any) -> bool:
    if isinstance(value, bool) or kind == "boolean":  # a flag takes true or false, never "yes"
        return isinstance(value, bool) and kind == "boolean"
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number":  # nan, inf and 1e309 (inf to TOML) are no setting: they switch a judgement off
        return isinstance(value, (int, float)) and math.isfinite(value)
    if kind == "string":
        return isinstance(value, (str, int))
    return isinstance(value, str)


def _toml_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def check_prices(config: ConfigFile, value: Any) -> dict[str, float]:
    """The reserved [prices] table: a GPU model (price per GPU-hour) or an instance type (price per
    node-hour) -> dollars, a positive finite number."""
    if not isinstance(value, dict):
        raise BadRequest(f"{config.where(('prices',))}: prices must be a table", hint="[prices]\nH100 = 2.5")
    for name, price in value.items():
        try:
            validate.price(price, f"[prices] {name}")
        except BadRequest as exc:
            raise BadRequest(
                f"{config.where(('prices', name))}: [prices] {name}: expected a positive number, got {price!r}",
                hint="dollars per GPU-hour by GPU model (H100 = 2.5) or per node-hour by instance type",
            ) from exc
    return {name: float(price) for name, price in value.items()}


def suggest(word: str, choices: list[str], what: str) -> str:
    from difflib import get_close_matches  # only on the way to an error

    close = get_close_matches(word, choices, n=1)
    return f"did you mean {close[0]!r}?" if close else f"the {what}: {', '.join(sorted(choices)) or 'none'}"


def plain(value: Any) -> Any:
    """A JSON-friendly copy of a parsed value (paths as strings, tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def as_document(settings: list[Setting], file: ConfigFile | None) -> dict[str, Any]:
    """`gpuenv config show --json`: the file in use and every setting with its source."""
    return {
        "file": str(file.path) if file else None,
        "found_by": file.found_by if file else None,
        "precedence": list(PRECEDENCE),
        "settings": [
            {
                "command": s.command,
                "option": s.option,
                "value": s.value,
                "source": s.source,
                "origin": s.origin,
                "overrides": [{"source": src, "origin": origin, "value": value} for src, origin, value in s.overrides],
            }
            for s in settings
        ],
    }


def as_lines(settings: list[Setting], file: ConfigFile | None) -> list[str]:
    """`gpuenv config show`: one line per setting, grouped by command."""
    lines = [f"config file: {file.path} (from {file.found_by})" if file else "config file: none"]
    lines.append("precedence: " + " > ".join(PRECEDENCE))
    width = max((len(s.option) for s in settings), default=0)
    command = None
    for s in settings:
        if s.command != command:
            command = s.command
            lines += ["", f"gpuenv {command}"]
        source = f"{s.source} {s.origin}" if s.origin else s.source
        lost = ", ".join(f"{src} {origin} = {value!r}" for src, origin, value in s.overrides)
        value = "-" if s.value is None else repr(s.value)
        lines.append(f"  {s.option:<{width}}  {value:<24} {source}" + (f" (overrides {lost})" if lost else ""))
    return lines
