"""Click's side of the settings: each option's GPUENV_… variable and finite float type, the config
file's values held against the options' own types and callbacks, and where each value came from.

gpuenv.config reads and checks the file without Click; this module converts between the two.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import click
from click.core import ParameterSource

from gpuenv import config
from gpuenv.cli.numbers import finite_float
from gpuenv.config import ConfigFile, Setting
from gpuenv.errors import BadRequest, GpuenvError


def is_secret(option: click.Option) -> bool:
    """An option carrying a secret (or asking for one): only ever given on the command line."""
    return bool(option.hide_input or option.prompt) or any(config.is_secret_name(n) for n in long_names(option))


def long_names(option: click.Option) -> list[str]:
    return [opt[2:] for opt in option.opts if opt.startswith("--")]


def options_of(command: click.Command) -> dict[str, click.Option]:
    """The settable options of a command by long name (aliases included), in the order of --help."""
    found: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value and not param.is_eager:
            found.update((name, param) for name in long_names(param))
    return found


def prepare_options(command: click.Command, path: tuple[str, ...]) -> None:
    """Give each option of a command (and of its static subcommands) its GPUENV_… variable, shown in
    --help, and a float type that takes finite numbers only, from a flag, the variable or the file."""
    if path[:1] in [(name,) for name in config.UNCONFIGURED_COMMANDS]:
        return
    for option in options_of(command).values():
        option.type = finite_float(option.type)
        if option.envvar is None and not is_secret(option):
            option.envvar = config.env_name(path, long_names(option)[0])
        option.show_envvar = option.envvar is not None
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            prepare_options(sub, (*path, name))


def default_map(
    file: ConfigFile | None, group: click.Group, ctx: click.Context, names: Iterable[str]
) -> dict[str, Any]:
    """Check the file's tables and return Click's default_map (keyed by parameter names) for these commands.

    Every table name is checked; the options of only the commands named (the one about to run), so
    that a command does not import the others.
    """
    if file is None:
        return {}
    known = [n for n in group.list_commands(ctx) if n not in config.UNCONFIGURED_COMMANDS]
    config.check_tables(file, known)
    wanted = [n for n in names if n in file.data and n in known]
    return {name: _table(file, group, ctx, (name,)) for name in wanted}


def _table(file: ConfigFile, group: click.Group, ctx: click.Context, path: tuple[str, ...]) -> dict[str, Any]:
    command = group.get_command(ctx, path[-1])
    assert command is not None  # the name was checked against the group's commands
    sub_ctx = click.Context(command, info_name=path[-1], parent=ctx)
    options = options_of(command)
    subcommands = command.list_commands(sub_ctx) if isinstance(command, click.Group) else []
    table: dict[str, Any] = {}
    for key, value in config.table_data(file, path).items():
        if key in subcommands and isinstance(value, dict) and isinstance(command, click.Group):
            table[key] = _table(file, command, sub_ctx, (*path, key))
            continue
        option = options.get(key)
        if option is None:
            raise BadRequest(
                f"{file.where((*path, key))}: [{'.'.join(path)}] {key!r} is not an option of gpuenv {' '.join(path)}",
                hint=config.suggest(key, [*options, *subcommands], "options"),
            )
        assert option.name is not None
        given = config.expand_home(value) if isinstance(option.type, click.Path) else value
        table[option.name] = _checked_value(file, sub_ctx, option, (*path, key), given)
    return table


def _checked_value(
    file: ConfigFile, ctx: click.Context, option: click.Option, keys: tuple[str, ...], value: Any
) -> Any:
    """The value as given, after the option's own type and validation callback accepted it."""
    where = f"{file.where(keys)}: [{'.'.join(keys[:-1])}] {keys[-1]}"
    if is_secret(option):
        raise BadRequest(
            f"{where}: an option that carries or asks for a secret is only taken from the command line",
            hint="put it in a file readable only by you (chmod 600) and name that file, e.g. --become-password-file",
        )
    problem = config.value_problem(_kind(option), value, many=option.multiple or option.nargs != 1)
    if problem:
        raise BadRequest(f"{where}: {problem}", hint=f"see gpuenv {' '.join(keys[:-1])} --help")
    try:
        option.process_value(ctx, value)
    except click.ClickException as exc:  # a BadParameter's bare message: the value did not come from a flag
        raise BadRequest(f"{where}: {exc.message}", hint=f"see gpuenv {' '.join(keys[:-1])} --help") from exc
    except GpuenvError as exc:
        raise BadRequest(f"{where}: {exc.message}", hint=exc.hint) from exc
    return value


def _kind(option: click.Option) -> config.Kind:
    kind = option.type
    if option.count:
        return "integer"
    if option.is_flag or isinstance(kind, click.types.BoolParamType):
        return "boolean"
    if isinstance(kind, click.types.IntParamType):
        return "integer"
    if isinstance(kind, click.types.FloatParamType):
        return "number"
    if isinstance(kind, click.types.StringParamType):
        return "string"
    return "text"  # choices, paths


def effective(ctx: click.Context, file: ConfigFile | None, path: tuple[str, ...]) -> list[Setting]:
    """Every option of the command parsed into ctx, with its value and the source that set it."""
    settings = []
    for name, option in options_of(ctx.command).items():
        if name != long_names(option)[0] or option.name is None:
            continue  # an alias
        source = ctx.get_parameter_source(option.name)
        file_key = config.file_key(file, path, long_names(option))
        keys = (*path, file_key or name)
        env_value = os.environ.get(option.envvar) if isinstance(option.envvar, str) else None
        lost: list[tuple[str, str, Any]] = []
        if source == ParameterSource.COMMANDLINE and env_value:
            lost.append(("env", str(option.envvar), env_value))
        if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT) and file and file_key:
            lost.append(("file", file.where(keys), config.table_data(file, path)[file_key]))
        origin = {
            ParameterSource.COMMANDLINE: ("flag", f"--{name}"),
            ParameterSource.ENVIRONMENT: ("env", str(option.envvar)),
            ParameterSource.DEFAULT_MAP: ("file", file.where(keys) if file else None),
        }.get(source or ParameterSource.DEFAULT, ("default", None))
        value = ctx.params.get(option.name)
        settings.append(Setting(" ".join(path), name, config.plain(value), origin[0], origin[1], tuple(lost)))
    return settings
