"""The allreduce check's verdict (pure): the ranks' results in, findings and metrics out. algbw =
bytes / time; busbw = algbw x the nccl-tests factor, compared with the baseline for the GPU model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.verify import nodes
from gpuenv.verify.baselines import Baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks.allreduce import blame
from gpuenv.verify.checks.allreduce.collectives import PAIR_BYTES, MiB
from gpuenv.verify.expectations import SATURATES, Expectations, Expected
from gpuenv.verify.model import Finding, GpuRef
from gpuenv.verify.outliers import beyond_spread
from gpuenv.verify.spread import Spread

FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
}


def bandwidth(coll: str, nbytes: int, seconds: float, world: int) -> tuple[float, float | None]:
    """(algbw, busbw) in GB/s with the nccl-tests definitions; busbw is None for one rank."""
    algbw = nbytes / seconds / 1e9
    if world < 2:
        return algbw, None
    return algbw, algbw * FACTORS[coll](world)


def evaluate(
    results: list[dict[str, Any]],
    *,
    world: int,
    device: str,
    gpu_name: str,
    baselines: Baselines,
    refs: list[GpuRef],
    expectations: Expectations | None = None,
) -> tuple[list[Finding], dict[str, Any]]:
    """Correctness always; speeds (against the GPU model, the recorded baseline and the node's
    other pairs) on GPUs only: on the CPU they measure a shared host's scheduler."""
    findings = _correctness(results, refs) + _pair_findings(results, refs) + ddp_findings(results)
    if device == "cuda" and expectations is not None:
        findings += slow_pairs(results, refs, spread=expectations.spread)
    table = _bandwidth_table(results, world) if world >= 2 else []
    judge = Judge(world=world, device=device, gpu_name=gpu_name, baselines=baselines, expectations=expectations)
    findings += judge.bandwidth(table)
    for coll, why in results[0].get("skipped", {}).items():
        findings.append(finding("allreduce.not-supported", f"{coll} not supported by this backend: {why}", item=coll))
    if world < 2:
        findings.append(finding("allreduce.ddp-one-rank", "DDP step skipped: one rank"))
    headline = next((row for row in reversed(table) if row["collective"] == "allreduce"), table[-1] if table else {})
    return findings, {
        "world": world,
        "backend": "nccl" if device == "cuda" else "gloo",
        "sizes": table,
        "headline": headline,
        "busbw_gbps": headline.get("busbw_gbps"),
        "algbw_gbps": headline.get("algbw_gbps"),
    }


def ddp_findings(results: list[dict[str, Any]]) -> list[Finding]:
    """Pure: after a DDP step every rank holds the same, finite parameters."""
    steps = [(r["rank"], r["ddp"]) for r in results if "ddp" in r]
    if not steps or (len({d["checksum"] for _, d in steps}) == 1 and all(d["finite"] for _, d in steps)):
        return []
    sums_text = ", ".join(f"rank {rank}={d['checksum']}" for rank, d in steps)
    return [finding("allreduce.ddp-disagree", f"DDP step: ranks disagree after one step ({sums_text})")]


def _correctness(results: list[dict[str, Any]], refs: list[GpuRef]) -> list[Finding]:
    findings = []
    for res in results:
        for err in res["errors"]:
            ref = refs[res["rank"]]
            on = f" on node {res['node']}" if res.get("node") else ""
            where = f"rank {res['rank']}{on} ({ref.label() if ref.uuid else res['device']})"
            message = (
                f"{where} got {err['wrong']} wrong element(s) of {err['elements']} in "
                f"{err['collective']} of {err['bytes'] // MiB} MiB, iteration {err['iteration']}: "
                f"element {err['index']} off by {err['off_by']:g}"
            )
            findings.append(finding("allreduce.wrong-result", message, gpu=ref))
    return findings


def _pair_findings(results: list[dict[str, Any]], refs: list[GpuRef]) -> list[Finding]:
    bad_pairs = {tuple(p["pair"]) for r in results for p in r.get("pairs", []) if p["wrong"]}
    if not bad_pairs:
        return []
    counts: dict[int, int] = {}
    for pair in bad_pairs:
        for member in pair:
            counts[member] = counts.get(member, 0) + 1
    suspects = [r for r, n in counts.items() if n > 1] or sorted(counts)
    names = ", ".join(refs[r].label() for r in sorted(suspects))
    pairs = ", ".join(f"{a}-{b}" for a, b in sorted(bad_pairs))
    message = f"pairwise allreduce fails on pairs {pairs}: suspect {names}"
    return [finding("allreduce.pair-suspect", message, gpu=refs[suspects[0]] if len(suspects) == 1 else None)]


def _bandwidth_table(results: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    table = []
    for key in results[0]["times"]:
        coll, nbytes_s = key.split(":")
        nbytes = int(nbytes_s)
        # The collective is as slow as its slowest rank.
        seconds = max(sum(r["times"][key]) / len(r["times"][key]) for r in results)
        algbw, busbw = bandwidth(coll, nbytes, seconds, world)
        table.append(
            {
                "collective": coll,
                "bytes": nbytes,
                "time_us": round(seconds * 1e6, 1),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": None if busbw is None else round(busbw, 3),
            }
        )
    return table


@dataclass(frozen=True)
class Judge:
    world: int
    device: str
    gpu_name: str
    baselines: Baselines
    expectations: Expectations | None

    def bandwidth(self, table: list[dict[str, Any]]) -> list[Finding]:
        """Each size's busbw against the GPU model's figure for this count (first line; large
        messages only, where busbw saturates), then the recorded baseline (second, tighter line)."""
        if self.world < 2:
            return [finding("allreduce.one-rank", "one rank: a collective is a no-op, no bandwidth to measure")]
        if self.device != "cuda":
            message = "no baseline for CPU (gloo): bandwidth reported, not judged; correctness judged"
            return [finding("allreduce.no-baseline", message)]
        findings: list[Finding] = []
        judged = False
        for row in table:
            model = self._model(row)
            if model is not None:
                judged = True
                verdict = model.verdict(row["busbw_gbps"])
                if verdict != "pass":
                    text = f"{row['collective']} {row['bytes'] // MiB} MiB: {model.text(row['busbw_gbps'])}"
                    if verdict == "fail":
                        findings.append(finding("allreduce.busbw-below-model", text))
                    else:
                        findings.append(finding("allreduce.busbw-under-model", text))
                    continue
            expected = self.baselines.expected_busbw(self.gpu_name, self.world, row["collective"], row["bytes"])
            if expected is not None:
                judged = True
                findings += self._against_baseline(row, expected)
        if not judged:
            where = f"{self.world}x {self.gpu_name} at these sizes"
            message = f"no baseline or model expectation for {where}: bandwidth reported, correctness judged"
            findings.append(finding("allreduce.no-baseline", message))
        return findings

    def expected(self, nbytes: int) -> dict[str, Any] | None:
        """The allreduce of nbytes' expected busbw, as bandwidth() takes it (the GPU model's figure,
        else the recorded baseline, on the CPU too): gbps, the share under which it warns, its source."""
        model = self._model({"collective": "allreduce", "bytes": nbytes}) if self.device == "cuda" else None
        if model is not None:
            return {"gbps": model.value, "below": model.warn_below, "source": f"{model.model}: {model.source}"}
        found = self.baselines.expected_busbw(self.gpu_name, self.world, "allreduce", nbytes)
        if found is None:
            return None
        return {"gbps": found, "below": self.baselines.warn_below, "source": f"baseline {self.baselines.origin}"}

    def _model(self, row: dict[str, Any]) -> Expected | None:
        if self.expectations is None or row["collective"] != "allreduce" or row["bytes"] < SATURATES:
            return None
        return self.expectations.busbw(self.gpu_name, self.world)

    def _against_baseline(self, row: dict[str, Any], expected: float) -> list[Finding]:
        verdict = self.baselines.judge(row["busbw_gbps"], expected)
        text = (
            f"{row['collective']} {row['bytes'] // MiB} MiB busbw {row['busbw_gbps']:.1f} GB/s "
            f"vs {expected:.0f} recorded for {self.world}x {self.gpu_name}"
        )
        if verdict == "fail":
            return [finding("allreduce.busbw-low", text + f" (under {self.baselines.fail_below:.0%})")]
        if verdict == "warn":
            return [finding("allreduce.busbw-under-expected", text + f" (under {self.baselines.warn_below:.0%})")]
        return []


def slow_pairs(results: list[dict[str, Any]], refs: list[GpuRef], *, spread: float) -> list[Finding]:
    """Pure: a pair whose allreduce takes longer than the node's median pair time / spread is
    named, with the GPU two slow pairs share."""
    times = {tuple(p["pair"]): p["time"] for r in results for p in r.get("pairs", []) if not p["wrong"]}
    slow = beyond_spread(times, spread=spread, better="lower")
    shared = [g for g in {g for o in slow for g in o.member} if sum(g in o.member for o in slow) > 1]
    out = []
    for o in slow:
        a, b = o.member
        suspect = [g for g in (a, b) if g in shared]
        blame = (
            f"suspect {refs[suspect[0]].label()}"
            if len(suspect) == 1
            else f"the link between {refs[a].label()} and {refs[b].label()}"
        )
        message = (
            f"pair {a}-{b}: allreduce of {PAIR_BYTES // MiB} MiB takes {o.value * 1e3:.3f} ms, "
            f"{1 / o.share:.1f}x the node's median pair {o.reference * 1e3:.3f} ms: {blame}"
        )
        out.append(finding("allreduce.pair-slow", message, gpu=refs[suspect[0]] if len(suspect) == 1 else None))
    return out


def across_nodes(
    results: list[dict[str, Any]],
    spread: Spread,
    findings: list[Finding],
    metrics: dict[str, Any],
    *,
    judge_speed: bool,
) -> str:
    """The node figures (intra, inter, pairs) and the localisation into metrics and findings (this
    node's: a slow node found elsewhere is a note here); a summary tail."""
    rank_nodes = [r["node"] for r in results]
    table = nodes.figures(results, rank_nodes)
    loc = results[0].get("localisation")
    findings[:] = blame.cleared(findings, loc, me=spread.node)
    findings += blame.findings(loc, me=spread.node, intra=table["intra"])
    findings += nodes.node_findings(table, judge_speed=judge_speed)
    named, _flagged = nodes.suspects(table["pairs"])
    if loc and loc.get("outcome") == "slow node":
        named += loc["nodes"]
    wrong = sorted({rank_nodes[res["rank"]] for res in results if res["errors"]})
    mine = table["intra"].get(spread.node, {}).get("busbw_gbps")
    inter = (table["inter"] or {}).get("busbw_gbps")
    if mine is not None:
        metrics["intra_node_busbw_gbps"] = mine
    if inter is not None:
        metrics["inter_node_busbw_gbps"] = inter
    metrics["multi_node"] = {
        "nodes": [{"node": n, "ranks": rs} for n, rs in nodes.layout(rank_nodes)],
        "intra_node": table["intra"],
        "inter_node": table["inter"],
        "node_pairs": table["pairs"],
        "suspect_nodes": sorted(set(named) | set(wrong)),
        "localisation": loc,
    }
    nnodes = len(table["intra"])
    tail = f"; {nnodes} node(s)"
    tail += f", inter-node busbw {inter:.2f} GB/s" if inter is not None else ", one node: nothing crosses nodes"
    if mine is not None:
        tail += f", intra-node busbw on {spread.node} {mine:.2f} GB/s"
    return tail + blame.summary(loc)
