"""The config file and the environment variables: settings a fleet sets once.

Click applies the precedence, flag > environment > config file > default, for every option of every
command: the file becomes the context's `default_map`, and each option gets the environment variable
GPUENV_<COMMAND>_<OPTION>, named after its command path and its long name. This module finds and reads
the file, checks every value against the command's own options (their types and validation callbacks,
so a value in the file is refused exactly like the same value on the command line), and reports where
each effective value came from.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from gpuenv.errors import BadRequest, GpuenvError

if TYPE_CHECKING:
    from gpuenv.verify.cost import PriceRow

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "GPUENV"
CONFIG_ENV = "GPUENV_CONFIG"
SYSTEM_FILE = Path("/etc/gpuenv/config.toml")
RESERVED_TABLES = ("prices",)  # GPU prices, {name: positive number}; read by later commands
UNCONFIGURED_COMMANDS = ("config",)  # the config command itself takes nothing from the file
MAX_BYTES = 1 << 20
PRECEDENCE = ("flag", "env", "file", "default")
_SECRET = re.compile(r"(^|-)(pass|password|passphrase|secret|token)($|-)")


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
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(
            f"{path.resolve()}: not valid TOML: {exc}", hint="see docs/configuration.md for the format"
        ) from exc
    return ConfigFile(path=path.resolve(), found_by=found_by, data=data, lines=key_lines(text))


_TABLE = re.compile(r"\[\s*([^\[\]]+?)\s*\]\s*(#.*)?")
_KEY = re.compile(r"((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'", text)
    return tuple(p[1:-1] if p[0] in "\"'" else p for p in parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of each table header and key, by its full dotted path (the first occurrence wins)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = _TABLE.fullmatch(stripped)
        if header:
            table = _dotted(header.group(1))
            lines.setdefault(table, number)
            continue
        key = _KEY.match(stripped)
        if key:
            lines.setdefault(table + _dotted(key.group(1)), number)
    return lines


def env_name(path: tuple[str, ...], option: str) -> str:
    return "_".join((ENV_PREFIX, *path, option)).upper().replace("-", "_")


def is_secret(option: click.Option) -> bool:
    """An option carrying a secret (or asking for one): only ever given on the command line."""
    if bool(option.hide_input or option.prompt):
        return True
    # a *-file option names a file holding the secret: that may be set (the file's mode is checked where read)
    return any(_SECRET.search(name) and not name.endswith("-file") for name in long_names(option))


def long_names(option: click.Option) -> list[str]:
    return [opt[2:] for opt in option.opts if opt.startswith("--")]


def options_of(command: click.Command) -> dict[str, click.Option]:
    """The settable options of a command by long name (aliases included), in the order of --help."""
    found: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value and not param.is_eager:
            found.update((name, param) for name in long_names(param))
    return found


def attach_envvars(command: click.Command, path: tuple[str, ...]) -> None:
    """Give each option of a command (and of its static subcommands) its GPUENV_… variable, shown in --help."""
    if path[:1] in [(name,) for name in UNCONFIGURED_COMMANDS]:
        return
    for option in options_of(command).values():
        if option.envvar is None and not is_secret(option):
            option.envvar = env_name(path, long_names(option)[0])
        option.show_envvar = option.envvar is not None
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            attach_envvars(sub, (*path, name))


def default_map(
    config: ConfigFile | None, group: click.Group, ctx: click.Context, names: Iterable[str]
) -> dict[str, Any]:
    """Check the file's tables and return Click's default_map (keyed by parameter names) for these commands.

    Every table name is checked; the options of only the commands named (the one about to run), so
    that a command does not import the others.
    """
    if config is None:
        return {}
    known = [n for n in group.list_commands(ctx) if n not in UNCONFIGURED_COMMANDS]
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
                hint=_suggest(key, [*known, *RESERVED_TABLES], "tables"),
            )
    wanted = [n for n in names if n in config.data and n in known]
    return {name: _table(config, group, ctx, (name,)) for name in wanted}


def _table(config: ConfigFile, group: click.Group, ctx: click.Context, path: tuple[str, ...]) -> dict[str, Any]:
    command = group.get_command(ctx, path[-1])
    assert command is not None  # the name was checked against the group's commands
    sub_ctx = click.Context(command, info_name=path[-1], parent=ctx)
    options = options_of(command)
    subcommands = command.list_commands(sub_ctx) if isinstance(command, click.Group) else []
    table: dict[str, Any] = {}
    for key, value in _table_data(config, path).items():
        if key in subcommands and isinstance(value, dict) and isinstance(command, click.Group):
            table[key] = _table(config, command, sub_ctx, (*path, key))
            continue
        option = options.get(key)
        if option is None:
            raise BadRequest(
                f"{config.where((*path, key))}: [{'.'.join(path)}] {key!r} is not an option of gpuenv {' '.join(path)}",
                hint=_suggest(key, [*options, *subcommands], "options"),
            )
        assert option.name is not None
        table[option.name] = _checked_value(config, sub_ctx, option, (*path, key), _expand_home(option, value))
    return table


def _expand_home(option: click.Option, value: Any) -> Any:
    """A leading ~ in a file's path value means the home folder, as it would on a command line."""
    if not isinstance(option.type, click.Path):
        return value
    if isinstance(value, list):
        return [_expand_home(option, v) for v in value]
    return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value


def _table_data(config: ConfigFile, path: tuple[str, ...]) -> Mapping[str, Any]:
    data: Any = config.data
    for key in path:
        data = data[key]
    return data  # type: ignore[no-any-return]


def _checked_value(
    config: ConfigFile, ctx: click.Context, option: click.Option, keys: tuple[str, ...], value: Any
) -> Any:
    """The value as given, after the option's own type and validation callback accepted it."""
    where = f"{config.where(keys)}: [{'.'.join(keys[:-1])}] {keys[-1]}"
    if is_secret(option):
        raise BadRequest(
            f"{where}: an option that carries or asks for a secret is only taken from the command line",
            hint="put it in a file readable only by you (chmod 600) and name that file, e.g. --become-password-file",
        )
    problem = _type_problem(option, value)
    if problem:
        raise BadRequest(f"{where}: {problem}", hint=f"see gpuenv {' '.join(keys[:-1])} --help")
    try:
        option.process_value(ctx, value)
    except click.ClickException as exc:  # a BadParameter's bare message: the value did not come from a flag
        raise BadRequest(f"{where}: {exc.message}", hint=f"see gpuenv {' '.join(keys[:-1])} --help") from exc
    except GpuenvError as exc:
        raise BadRequest(f"{where}: {exc.message}", hint=exc.hint) from exc
    return value


def _type_problem(option: click.Option, value: Any) -> str | None:
    if option.multiple or option.nargs != 1:
        if not isinstance(value, list):
            return f"expected a list, got {_toml_type(value)}"
        return next((p for p in (_scalar_problem(option, v) for v in value) if p), None)
    return _scalar_problem(option, value)


def _scalar_problem(option: click.Option, value: Any) -> str | None:
    kind = option.type
    if option.count:
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif option.is_flag or isinstance(kind, click.types.BoolParamType):
        ok, want = isinstance(value, bool), "true or false"
    elif isinstance(kind, click.types.IntParamType):
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(kind, click.types.FloatParamType):
        ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(kind, click.types.StringParamType):  # a whole number is fine (port = 22), a float is
        # not: cuda = 12.10 would read 12.1
        ok, want = isinstance(value, (str, int)) and not isinstance(value, bool), 'a string (quote it: "...")'
    else:  # choices, paths
        ok, want = isinstance(value, str), "a string"
    return None if ok else f"expected {want}, got {_toml_type(value)} {value!r}"


def _toml_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def check_prices(config: ConfigFile, value: Any) -> dict[str, float]:
    """The reserved [prices] table: a GPU model (price per GPU-hour) or an instance type (price per
    node-hour) -> dollars, a positive finite number."""
    from gpuenv import validate

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


def price_rows(config: ConfigFile | None) -> tuple[PriceRow, ...]:
    """The [prices] table as cost.PriceRow entries, each with the line it is on (none without a file)."""
    from gpuenv.verify.cost import PriceRow

    if config is None or "prices" not in config.data:
        return ()
    prices = check_prices(config, config.data["prices"])
    return tuple(PriceRow(name, value, config.where(("prices", name))) for name, value in prices.items())


def _suggest(word: str, choices: list[str], what: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"did you mean {close[0]!r}?" if close else f"the {what}: {', '.join(sorted(choices)) or 'none'}"


def effective(ctx: click.Context, config: ConfigFile | None, path: tuple[str, ...]) -> list[Setting]:
    """Every option of the command parsed into ctx, with its value and the source that set it."""
    settings = []
    for name, option in options_of(ctx.command).items():
        if name != long_names(option)[0] or option.name is None:
            continue  # an alias
        source = ctx.get_parameter_source(option.name)
        file_key = _file_key(config, path, option)
        keys = (*path, file_key or name)
        env_value = os.environ.get(option.envvar) if isinstance(option.envvar, str) else None
        lost: list[tuple[str, str, Any]] = []
        if source == ParameterSource.COMMANDLINE and env_value:
            lost.append(("env", str(option.envvar), env_value))
        if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT) and config and file_key:
            lost.append(("file", config.where(keys), _table_data(config, path)[file_key]))
        origin = {
            ParameterSource.COMMANDLINE: ("flag", f"--{name}"),
            ParameterSource.ENVIRONMENT: ("env", str(option.envvar)),
            ParameterSource.DEFAULT_MAP: ("file", config.where(keys) if config else None),
        }.get(source or ParameterSource.DEFAULT, ("default", None))
        value = ctx.params.get(option.name)
        settings.append(Setting(" ".join(path), name, _plain(value), origin[0], origin[1], tuple(lost)))
    return settings


def _file_key(config: ConfigFile | None, path: tuple[str, ...], option: click.Option) -> str | None:
    """The name (or alias) under which the file sets this option, if it does."""
    data: Any = config.data if config else {}
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return next((n for n in long_names(option) if isinstance(data, dict) and n in data), None)


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of a parsed value (paths as strings, tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
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
