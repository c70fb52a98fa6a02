"""The runs across nodes in a fleet report (pure): each run's localisation once — every node of a run
reports the same rounds — with the hosts that reported it, for the JSON and the HTML page."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gpuenv.fleet.report_model import HostReport

KEPT = ("outcome", "nodes", "why", "rounds", "budget", "seconds", "setup_s", "exceeded")


def runs(hosts: Iterable[HostReport]) -> list[dict[str, Any]]:
    """One entry per run (its job id and rounds: a job id can repeat across runs), in host order."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for host in hosts:
        if host.localisation is None:
            continue
        job, loc = host.localisation
        kept = {k: loc.get(k) for k in KEPT}
        entry = found.setdefault((job, json.dumps(kept, sort_keys=True)), {"job": job, "hosts": [], **kept})
        entry["hosts"].append(host.host)
    return list(found.values())
