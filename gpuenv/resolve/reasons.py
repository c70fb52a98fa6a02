"""What a resolution says beyond the stack: the alternatives it passed over, and, when nothing fits, what
ruled every alternative out, by the option that did. Pure; a platform adds its own words through
`Resolution.refusal_line` and `Resolution.hints`.
"""

from __future__ import annotations

from collections import Counter

from gpuenv.compat import KnowledgeBase, V
from gpuenv.resolve.candidates import Candidate, Refused, Resolution
from gpuenv.resolve.ranking import ranked_below
from gpuenv.resolve.request import Request
from gpuenv.stack import Rejected


def nearby(
    refused: list[Refused], chosen: Candidate, survivors: list[Candidate], resolution: Resolution
) -> list[Rejected]:
    """The alternatives worth showing, nearest first: the chosen release's other builds, then newer releases,
    each ruled out by a constraint or ranked below the choice."""
    version = V(chosen.torch.version)
    passed_over = [
        (c.torch, Rejected(f"torch {c.torch.version}+{c.build}", ranked_below(c, chosen, resolution)))
        for c in survivors
        if c != chosen and V(c.torch.version) >= version
    ]
    ruled_out = [(r.torch, Rejected(r.choice, r.why)) for r in refused if V(r.torch.version) >= version]
    ordered = sorted(passed_over + ruled_out, key=lambda pair: V(pair[0].version))
    return runs_merged([rejected for _, rejected in ordered])[:8]


def runs_merged(rejected: list[Rejected]) -> list[Rejected]:
    """Consecutive releases ruled out for the same reason as one range: torch 2.1.0–2.3.1."""
    merged: list[Rejected] = []
    for r in rejected:
        last = merged[-1] if merged else None
        if last is not None and last.why == r.why and "+" not in last.choice + r.choice:
            first = last.choice.split("–")[0]
            merged[-1] = Rejected(f"{first}–{r.choice.removeprefix('torch ')}", r.why)
        else:
            merged.append(r)
    return merged


def refusals(refused: list[Refused], request: Request, resolution: Resolution) -> str:
    """What ruled every alternative out, by the option that did (--os's images, --driver, --gpu, …): the options
    the user gave first, then what the defaults ruled out; within one, the reason that ruled out most first."""
    by_constraint: dict[str, list[Refused]] = {}
    for r in refused:
        by_constraint.setdefault(r.constraint, []).append(r)
    if len(by_constraint) > 1:  # releases without the build asked for are not news beside the rest
        by_constraint.pop(resolution.option, None)
    given = request.given()
    parts = []
    for constraint, items in sorted(by_constraint.items(), key=lambda pair: pair[0] not in given):
        flag = f"--{constraint} {given[constraint]}" if constraint in given else f"--{constraint}"
        line = resolution.refusal_line(constraint, items, flag)
        if line is None:
            count = Counter(why for why, _ in dict.fromkeys((r.why, r.torch.version) for r in items))
            whys = sorted(count, key=lambda why: -count[why])  # releases per reason; equals keep the releases' order
            more = f" (and {len(whys) - 3} more)" if len(whys) > 3 else ""
            line = f"{flag}: {'; '.join(whys[:3])}{more}"
        parts.append(line)
    return "; ".join(parts) or "nothing the knowledge base knows matches"


def no_stack_message(request: Request) -> str:
    given = ", ".join(f"--{k} {v}" for k, v in request.given().items())
    return f"no stack satisfies {given}"


def release_lines(kb: KnowledgeBase) -> str:
    """'1.13.0–1.13.1, 2.0.0–2.0.1, …': every known release, by release line."""
    lines: dict[str, list[str]] = {}
    for t in kb.torch:
        lines.setdefault(".".join(t.version.split(".")[:2]), []).append(t.version)
    return ", ".join(v[0] if len(v) == 1 else f"{v[0]}–{v[-1]}" for v in lines.values())
