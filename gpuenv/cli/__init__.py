"""The gpuenv command line: a thin Click layer over the core and the adapters. Subcommands are
imported only when run, so `gpuenv --help` and `gpuenv resolve` never pay for torch, docker,
ansible_runner or pynvml. `main` is the one place where errors become exit codes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, NamedTuple

import click

from gpuenv import __version__, config, processes
from gpuenv.cli import config_options
from gpuenv.cli.errors import name_the_flag, print_error, said
from gpuenv.errors import EXIT_BAD_REQUEST, EXIT_CANNOT_RUN, BadRequest, GpuenvError


class CommandEntry(NamedTuple):
    """A registered command: where its Click command lives ("module:function", imported only when run) and the
    first line of its help, so `gpuenv --help` lists the commands without importing them (a command module
    imports its service at its top); tests/core/test_cli.py keeps the summary equal to the command's own."""

    target: str
    summary: str = ""  # none: `--help` asks the command itself (one a test registers)

    def load(self) -> click.Command:
        module, function = self.target.split(":")
        command: click.Command = getattr(import_module(module), function)
        return command


# a command is listed here only once it works
COMMANDS: dict[str, CommandEntry] = {
    "resolve": CommandEntry("gpuenv.cli.resolve_cmd:resolve",
        "Work out a fully pinned, matched stack, and explain each choice."),
    "matrix": CommandEntry("gpuenv.cli.resolve_cmd:matrix",
        "Show the compatibility knowledge base as tables."),
    "provision": CommandEntry("gpuenv.cli.provision_cmd:provision",
        "Install the NVIDIA driver, PyTorch and gpuenv on HOSTS, then certify them."),
    "build-image": CommandEntry("gpuenv.cli.build_cmd:build_image",
        "Render a Dockerfile matched to the stack and build the image through Docker."),
    "verify": CommandEntry("gpuenv.cli.verify_cmd:verify",
        "Certify this node (or, with --image, an image) for PyTorch work."),
    "kb": CommandEntry("gpuenv.cli.kb_cmd:kb",
        "The compatibility knowledge base."),
    "config": CommandEntry("gpuenv.cli.config_cmd:config_group",
        "The config file in use and where each setting comes from (see docs/configuration.md)."),
    "slurm": CommandEntry("gpuenv.cli.slurm_cmd:slurm",
        "Slurm hooks that drain a bad node with a `gpuenv:` reason and resume only gpuenv's drains."),
    "fleet": CommandEntry("gpuenv.cli.fleet_cmd:fleet",
        "Many nodes: verify them over Ansible or Slurm, compare them, remember every GPU."),
    "tune": CommandEntry("gpuenv.cli.tune_cmd:tune",
        "Tune this node's GPUs for efficiency (see docs/power.md)."),
    "info": CommandEntry("gpuenv.cli.info_cmd:info",
        "This machine: GPUs, driver, CUDA, torch, NVML and the stack gpuenv resolves for it."),
}  # fmt: skip

EPILOG = """\b
Examples:
  gpuenv info                             # this machine's GPUs, driver, torch and stack
  gpuenv resolve --cuda 11.7              # the pinned stack for CUDA 11.7
  gpuenv resolve --driver auto --gpu H100 # what this machine's driver can run
  gpuenv matrix --torch 2.4               # the knowledge base as a table
  gpuenv build-image --cuda 11.7 --verify # build a matched image and certify it
  gpuenv provision gpu01 --cuda 12.4      # install and certify a host over SSH
  gpuenv verify --level standard          # certify this node
  gpuenv fleet verify -i hosts.ini        # certify every host of an inventory
  gpuenv kb refresh -o new.json           # a newer knowledge base from the indexes
  gpuenv config show verify               # each setting of verify and where it came from
  gpuenv tune power                       # tokens per joule at each power cap, limits put back

Exit codes: 0 ok, 1 the thing checked is bad, 2 bad request, 3 gpuenv could not run.
Shell completion (bash): eval "$(_GPUENV_COMPLETE=bash_source gpuenv)"
"""


@dataclass(frozen=True)
class Settings:
    """Options of the gpuenv group, handed to every subcommand through ctx.obj."""

    debug: bool = False
    verbose: int = 0
    quiet: bool = False
    data: Path | None = None
    config: config.ConfigFile | None = None


def settings(ctx: click.Context) -> Settings:
    """The one way a command reads the settings (a command invoked on its own gets the defaults)."""
    found = ctx.find_object(Settings)
    return found if found is not None else Settings()


# words other tools take as commands that are gpuenv's options
FLAG_WORDS = {"version": "gpuenv --version", "help": "gpuenv --help"}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = entry.load()
        config_options.prepare_options(command, (cmd_name,))
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The command; a name that is none of them is a bad request that names the nearest one."""
        name = args[0] if args else ""
        unknown = name and not name.startswith("-") and name not in COMMANDS and name not in self.commands
        if unknown and not ctx.resilient_parsing:  # shell completion asks quietly
            from difflib import get_close_matches  # only on the way to an error

            near = [f"gpuenv {n}" for n in get_close_matches(name, list(COMMANDS), n=1)]
            near = [FLAG_WORDS[name]] if name in FLAG_WORDS else near
            hint = f"did you mean: {near[0]}" if near else "gpuenv --help lists the commands"
            raise BadRequest(f"no such command {name!r}", hint=hint)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their summaries, from the registry: listing them imports none of them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._summary(ctx, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _summary(self, ctx: click.Context, name: str, limit: int) -> str:
        summary = COMMANDS[name].summary if name in COMMANDS else ""
        if summary:
            return click.Command(name, help=summary).get_short_help_str(limit)
        command = self.get_command(ctx, name)  # registered by a test with no summary: ask the command itself
        return command.get_short_help_str(limit) if command is not None else ""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuenv")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-v", "--verbose", count=True, help="More detail (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors and the result.")
@click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="GPUENV_DATA",
    show_envvar=True,
    help="Use this compatibility knowledge base instead of the shipped one.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Settings file (TOML) [default: $GPUENV_CONFIG, else ~/.config/gpuenv/config.toml, else /etc/gpuenv/…].",
)
@click.option("--no-config", is_flag=True, envvar="GPUENV_NO_CONFIG", show_envvar=True, help="Read no config file.")
@click.pass_context
def cli(
    ctx: click.Context,
    debug: bool,
    verbose: int,
    quiet: bool,
    data: Path | None,
    config_file: Path | None,
    no_config: bool,
) -> None:
    """Take GPU servers from bare to certified for PyTorch work."""
    if config_file is not None and no_config:
        if ctx.get_parameter_source("no_config") == click.core.ParameterSource.COMMANDLINE:
            raise BadRequest("--config and --no-config exclude each other", hint="use one")
        no_config = False  # a --config flag beats GPUENV_NO_CONFIG in the environment
    settings_file = None if no_config else config.load(config_file, os.environ)
    assert isinstance(ctx.command, click.Group)
    # the file's settings become Click's default_map: below the command line and the environment
    ctx.default_map = config_options.default_map(settings_file, ctx.command, ctx, [ctx.invoked_subcommand or ""])
    ctx.obj = Settings(debug=debug, verbose=verbose, quiet=quiet, data=data, config=settings_file)
    if verbose or quiet:
        import logging  # what the libraries log (the Docker SDK, ansible-runner), on request only

        level = logging.ERROR if quiet else logging.DEBUG if verbose > 1 else logging.INFO
        logging.basicConfig(level=level, format="gpuenv: %(message)s")


# The group's own options: given after a command, they are said to go before it (see _run). They are
# not accepted there: a command's options are its own, and one of them may one day take such a name.
GROUP_OPTIONS = ("--debug", "-v", "--verbose", "-q", "--quiet", "--data", "--config", "--no-config", "--version")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    processes.install()
    for stream in (sys.stdout, sys.stderr):  # an ASCII-only terminal gets '?' for what it cannot show
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    code = _run(args, debug="--debug" in args)
    if argv is None:  # gpuenv is the whole process (not called from Python): its exit code stands
        processes.ignore_from_now()
    sys.exit(code)


def _traceback(debug: bool) -> None:
    if debug:
        import traceback  # only for --debug: off every command's start-up

        traceback.print_exc()


def _run(args: list[str], *, debug: bool) -> int:
    """Run the command; the exit code, with every error said in one line (a traceback with --debug)."""
    try:
        result: Any = cli.main(args=args, prog_name="gpuenv", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:  # Click's word for Ctrl-C or end of input at a prompt
        print_error("interrupted", None)
        return EXIT_CANNOT_RUN
    except click.NoSuchOption as exc:
        if exc.option_name not in GROUP_OPTIONS:
            print_error(*said(exc))
            return EXIT_BAD_REQUEST
        where = exc.ctx.info_name if exc.ctx is not None else "COMMAND"
        hint = f"put it before the command: gpuenv {exc.option_name} {where} ..."
        print_error(f"{exc.option_name} is an option of gpuenv itself, not of {where}", hint)
        return EXIT_BAD_REQUEST
    except click.ClickException as exc:
        if isinstance(exc, click.BadParameter):
            name_the_flag(exc)
        _traceback(debug)
        print_error(*said(exc))
        return EXIT_BAD_REQUEST
    except GpuenvError as exc:
        _traceback(debug)
        print_error(exc.message, exc.hint)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # one rule for every command: interrupted is exit 3, and says so
        print_error(f"interrupted by {exc}" if str(exc) else "interrupted", None)
        return EXIT_CANNOT_RUN
    except Exception as exc:  # gpuenv itself crashed: never blame the thing checked
        _traceback(debug)
        print_error(f"gpuenv crashed: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback")
        return EXIT_CANNOT_RUN
    return result if isinstance(result, int) else 0
