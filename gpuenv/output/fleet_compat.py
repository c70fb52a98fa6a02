"""`gpuenv fleet compat`'s renderers: the hosts grouped by verdict and reason, each group's hosts as a host list."""

from __future__ import annotations

from gpuenv.fleet.compat import CompatResult, compressed
from gpuenv.fleet.compat_rules import WORDS
from gpuenv.output.fleet import _gauge, _label, _md_table
from gpuenv.output.jsontext import json_text
from gpuenv.output.screen import Block, Screen, line, table

COLUMNS = ("verdict", "why", "hosts", "host list")
JUDGED_AS = {
    "image": "judged as an image: it brings its OS and Python, and its nvidia/cuda base's cuda-compat",
    "host": "judged installed on the host, as provision installs it: the host's OS, its Python and driver",
    "pip": "judged installed by pip into the host's Python: the host's OS, Python and driver",
}


def rows(result: CompatResult) -> list[tuple[str, str, str, str]]:
    return [(WORDS[g.state], g.reason or "-", str(len(g.hosts)), compressed(g.hosts)) for g in result.groups()]


def screen(result: CompatResult) -> Screen:
    blocks: list[Block] = [line(result.summary()), line(JUDGED_AS[result.installed])]
    blocks.append(table(COLUMNS, rows(result), title="Hosts by verdict and reason", title_left=True))
    blocks += [line(f"skipped {s.path}: {s.reason}") for s in result.skipped]
    blocks += [line(f"warning: {w}") for w in result.warnings]
    return tuple(blocks)


def to_json(result: CompatResult) -> str:
    return json_text(result.to_dict())


def to_markdown(result: CompatResult) -> str:
    lines = ["# Fleet compatibility", "", result.summary(), "", JUDGED_AS[result.installed], ""]
    lines += [*_md_table(COLUMNS, rows(result)), ""]
    lines += [f"- skipped `{s.path}`: {s.reason}" for s in result.skipped]
    lines += [f"- warning: {w}" for w in result.warnings]
    return "\n".join(lines).rstrip("\n") + "\n"


def to_prometheus(result: CompatResult) -> str:
    """node_exporter textfile format: hosts by verdict, and each host's."""
    lines = _gauge("gpuenv_fleet_compat_hosts", "Hosts by whether they run the stack: runs, caveat, no, unknown.")
    lines += [f'gpuenv_fleet_compat_hosts{{state="{s}"}} {n}' for s, n in result.counts().items()]
    lines += _gauge("gpuenv_fleet_compat_host_runs", "1 when the host runs the stack (a caveat allowed).")
    lines += [
        f'gpuenv_fleet_compat_host_runs{{host="{_label(h.host)}",state="{h.verdict.state}"}} '
        f"{int(h.verdict.state in ('runs', 'caveat'))}"
        for h in result.hosts
    ]
    return "\n".join(lines) + "\n"
