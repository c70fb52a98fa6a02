"""`gpuenv config show|path`: the config file in use, and every effective setting with its source."""

from __future__ import annotations

import os

import click

from gpuenv import config
from gpuenv.cli import settings as settings_of
from gpuenv.cli.config_options import default_map, effective
from gpuenv.cli.output import emit_json
from gpuenv.cli.params import SHOWING_SETTINGS
from gpuenv.errors import BadRequest

SCHEMA = "gpuenv.config/1"

SHOW_EPILOG = """\b
Examples:
  gpuenv config show verify                 # each verify option, its value and its source
  gpuenv config show verify --level quick   # ... as this command line would set them
  gpuenv config show --json                 # every command, as JSON
Precedence: flag > environment (GPUENV_<COMMAND>_<OPTION>) > config file > default.
Exit codes: 0 shown (a folder a setting names need not exist here), 2 bad request (an unknown
command, a config file or value that is not valid), 3 gpuenv crashed.
"""
PATH_EPILOG = """\b
Examples:
  gpuenv config path                       # the file in use, else nothing on stdout
  gpuenv --config fleet.toml config path   # checks that fleet.toml exists
Exit codes: 0 (also when no file is in use: stderr says where gpuenv looked), 2 a file named by
--config or $GPUENV_CONFIG that does not exist or is not valid TOML, 3 gpuenv crashed.
"""
GROUP_EPILOG = """\b
Examples:
  gpuenv config show verify    # each verify option, its value and where it came from
  gpuenv config path           # the config file in use
Exit codes: 0 shown, 2 bad request (an unknown command, a config file that is not valid).
"""


@click.group("config", epilog=GROUP_EPILOG)
def config_group() -> None:
    """The config file in use and where each setting comes from (see docs/configuration.md)."""


@config_group.command("path", epilog=PATH_EPILOG)
@click.pass_context
def path(ctx: click.Context) -> None:
    """Print the config file in use (nothing on stdout when none is)."""
    found = settings_of(ctx).config
    if found is not None:
        click.echo(str(found.path))
        return
    looked = ", ".join(str(p) for _, p in config.candidates(os.environ))
    click.echo(f"gpuenv: no config file in use (--no-config, or none of ${config.CONFIG_ENV}, {looked})", err=True)


@config_group.command(
    "show", epilog=SHOW_EPILOG, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@click.argument("command", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def show(ctx: click.Context, as_json: bool, command: str | None, args: tuple[str, ...]) -> None:
    """Show every effective setting of COMMAND (default: all), with its value and where it came from.

    ARGS are COMMAND's own options, to see what a command line would change.
    """
    root = ctx.find_root()
    group = root.command
    assert isinstance(group, click.Group)
    names = [n for n in group.list_commands(root) if n not in config.UNCONFIGURED_COMMANDS]
    if command is not None and command not in names:
        raise BadRequest(f"{command!r} is not a gpuenv command with settings", hint=f"one of: {', '.join(names)}")
    chosen = [command] if command else names
    file = settings_of(ctx).config
    root.meta[SHOWING_SETTINGS] = True  # settings are shown, not used: no folder need exist here
    defaults = default_map(file, group, root, chosen)
    parent = click.Context(group, info_name=root.info_name, obj=root.obj, default_map=defaults)
    parent.meta[SHOWING_SETTINGS] = True
    settings: list[config.Setting] = []
    for name in chosen:
        settings += _settings(group, parent, (name,), list(args), file)
    _present(settings, file, as_json=as_json)


def _settings(
    group: click.Group, parent: click.Context, path: tuple[str, ...], args: list[str], file: config.ConfigFile | None
) -> list[config.Setting]:
    """The settings of one command; for a group, of the group and then of its subcommands."""
    command = group.get_command(parent, path[-1])
    assert command is not None
    if not isinstance(command, click.Group):
        return effective(command.make_context(path[-1], args or _stand_ins(command), parent=parent), file, path)
    ctx = command.make_context(path[-1], [], parent=parent, resilient_parsing=True)
    found = effective(ctx, file, path)
    subcommands = command.list_commands(ctx)
    chosen = [args[0]] if args and args[0] in subcommands else subcommands
    for name in chosen:
        found += _settings(command, ctx, (*path, name), args[1:] if chosen == args[:1] else [], file)
    return found


def _stand_ins(command: click.Command) -> list[str]:
    """Placeholders for a command's required arguments (report paths, a GPU's UUID): they are what
    a command works on, not settings, and `config show` without ARGS must still parse it."""
    required = [p for p in command.params if isinstance(p, click.Argument) and p.required]
    return ["--", *("-" for _ in required)] if required else []


def _present(settings: list[config.Setting], file: config.ConfigFile | None, *, as_json: bool) -> None:
    if as_json:
        emit_json({"schema": SCHEMA, **config.as_document(settings, file)})
    else:
        click.echo("\n".join(config.as_lines(settings, file)))
