"""`gpuenv kb refresh`: options in, one request to gpuenv.kb.refresh, the result as text or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gpuenv.cli.output import emit_json
from gpuenv.cli.params import checked
from gpuenv.kb.refresh import RefreshRequest
from gpuenv.kb.refresh import refresh as run
from gpuenv.kb.sources import check_base_url, with_bases

DIR = click.Path(file_okay=False, path_type=Path)


def _url(value: str) -> str:
    return check_base_url(value)


REFRESH_EPILOG = """\b
Examples:
  gpuenv kb refresh -o new.json && gpuenv --data new.json resolve --torch 2.15
  gpuenv kb refresh --from snapshot/ -o new.json   # air-gapped
  gpuenv kb refresh --record snapshot/ -o new.json # keep what was read, for the air-gapped run

\b
Exit codes: 0 the proposal written (the shipped knowledge base is never changed), 2 bad request (a bad
URL, snapshot or output path), 3 an index could not be read (network, timeout) or gpuenv crashed.
"""


@click.group(epilog=REFRESH_EPILOG)
def kb() -> None:
    """The compatibility knowledge base."""


@kb.command(epilog=REFRESH_EPILOG)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gpuenv-kb.json"),
    show_default=True,
    help="Where to write the proposed knowledge base (never the shipped one).",
)
@click.option("--from", "snapshot", type=DIR, help="Read a recorded snapshot instead of the network.")
@click.option("--record", type=DIR, help="Also write everything read to this snapshot directory.")
@click.option("--pypi-url", callback=checked(_url), help="Package index base [https://pypi.org].")
@click.option("--pypi-files-url", callback=checked(_url), help="Its file host [https://files.pythonhosted.org].")
@click.option("--pytorch-url", callback=checked(_url), help="PyTorch's wheel index [https://download.pytorch.org/whl].")
@click.option("--dockerhub-url", callback=checked(_url), help="Docker Hub [https://hub.docker.com].")
@click.option("--cuda-redist-url", callback=checked(_url), help="NVIDIA's CUDA redist index [.../compute/cuda/redist].")
@click.option("--nvidia-drivers-url", callback=checked(_url), help="Driver releases.json [docs.nvidia.com/…/drivers].")
@click.option(
    "--timeout", type=click.FloatRange(0.1, 600), default=30.0, show_default=True, help="Seconds per request."
)
@click.option("--retries", type=click.IntRange(0, 10), default=2, show_default=True, help="Retries per request.")
@click.option("--json", "as_json", is_flag=True, help="The result as JSON.")
@click.pass_obj
def refresh(settings: Any, /, snapshot: Path | None, record: Path | None, as_json: bool, **opts: Any) -> None:
    """Propose a new knowledge base from the upstream indexes (or a snapshot) and show what changed."""
    indexes = ("pypi", "pypi_files", "pytorch", "dockerhub", "cuda_redist", "nvidia_drivers")
    bases = with_bases(**{index: opts[f"{index}_url"] for index in indexes})
    request = RefreshRequest(opts["output"], settings.data, snapshot, record, bases, opts["timeout"], opts["retries"])
    result = run(request)
    if as_json:
        emit_json(result.to_dict())
        return
    click.echo(f"proposed knowledge base: {result.output} (facts of {result.generated}, from {result.origin})")
    for change in result.changes:
        click.echo(change.line())
    click.echo(
        "no change to the torch, cuda and driver rows" if not result.changes else f"{len(result.changes)} change(s)"
    )
    for note in result.notes:
        click.echo(f"note: {note}")
    click.echo(f"carried over from the file in use: {', '.join(result.carried_over)}")
    click.echo(f"use it: gpuenv --data {result.output} resolve   (or GPUENV_DATA={result.output})")
