"""Localisation across nodes (pure): which groups of nodes to measure, round by round, and what their
figures name — a slow node, a slow link, or nothing that can be named.

A group is a set of whole nodes (every rank of each), measured with one allreduce of the same size;
its busbw is compared with the groups of its kind measured so far (groups across nodes with each
other, a node alone with the other nodes alone), never with a figure for another message or count:
the slow ones lie below the widest step in their sorted busbw, when that step is wide enough.

- Round 0, the whole: every rank. Its slowness is the reason to search: below its expectation (the
  caller says so), or far below the groups the search measures after it.
- Halves, measured at once: a half far slower than the other is searched the same way; a half of one
  node takes a witness, a node already seen fine (one rank alone measures nothing, and a node with a
  witness measures its own link to a good one). Two halves that cannot be compared (a node alone
  against a group across nodes: three nodes) end the halving: every pair of the segment is measured.
- Neither half slow but their parent was: the fault lies between them, so node pairs across the two
  halves are measured, a round-robin schedule of disjoint pairs, every pair of a round at once.

The outcome: a **slow node** is in no fine group and in every slow group; a **slow link** is a pair
measured slow whose two nodes are both in fine groups, and in every slow group; else **not
localised** when anything was slow (with the nodes still under suspicion), **nothing slow** when
nothing was. A generator yields the rounds; the caller measures each and records it before asking
for the next, and stops it at its budget. The groups every path could reach within a number of rounds
(`reachable`) are created before any collective runs: torch's new_group needs every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

Kind = Literal["whole", "cross", "node"]
Decision = Literal["left", "right", "between", "stop"]
OutcomeKind = Literal["slow node", "slow link", "not localised", "nothing slow"]
BRANCHES: tuple[Decision, ...] = ("left", "right", "between")
Pair = tuple[int, int]
Decider = Callable[[tuple["Group", "Group"], "Group"], Decision]  # (halves, their parent) -> where next


@dataclass(frozen=True)
class Group:
    nodes: tuple[int, ...]  # node indices, in the run's node order
    ranks: tuple[int, ...]  # every rank of those nodes, sorted
    kind: Kind
    witnesses: tuple[int, ...] = ()  # nodes lent from a fine group: not under suspicion here

    @property
    def suspects(self) -> tuple[int, ...]:
        return tuple(n for n in self.nodes if n not in self.witnesses)


@dataclass(frozen=True)
class Measured:
    round: int
    label: str  # "whole", "halves", "pairs"
    group: Group
    seconds: float
    busbw: float


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    nodes: tuple[int, ...] = ()  # the slow node, the link's two nodes, or the suspects left

    @property
    def named(self) -> bool:
        return self.kind in ("slow node", "slow link")


@dataclass
class Search:
    """The search over nodes given as their ranks (`node_ranks[i]`: node i's global ranks)."""

    node_ranks: Sequence[Sequence[int]]
    share: float  # a step in busbw this wide (the lower over the higher, at most) parts slow groups from fine
    whole_below: bool = False  # the whole collective was under its expectation
    measured: list[Measured] = field(default_factory=list)

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(range(len(self.node_ranks)))

    def group(self, nodes: Sequence[int], witnesses: Sequence[int] = ()) -> Group:
        ranks = tuple(sorted(r for n in nodes for r in self.node_ranks[n]))
        kind: Kind = "whole" if len(nodes) == len(self.node_ranks) else "cross" if len(nodes) > 1 else "node"
        return Group(tuple(sorted(nodes)), ranks, kind, tuple(witnesses))

    # the rounds

    def rounds(self) -> Iterator[tuple[str, list[Group]]]:
        """Each round's label and groups (round 0 the whole); record() each before the next."""
        return self._rounds(self.decide, lambda: self.outcome().named)

    def _rounds(self, decide: Decider, named: Callable[[], bool]) -> Iterator[tuple[str, list[Group]]]:
        whole = self.group(self.nodes)
        seen = {whole.nodes}
        yield "whole", [whole]
        segment: tuple[int, ...] = self.nodes
        witnesses: tuple[int, ...] = ()
        parent = whole
        while True:
            halves = self.halves(segment, witnesses)
            if halves is None:
                yield from self._pairs(round_robin(segment), seen, named)
                return
            seen |= {h.nodes for h in halves}
            yield "halves", list(halves)
            decision = decide(halves, parent)
            if decision == "between":
                yield from self._pairs(across(halves[0].suspects, halves[1].suspects), seen, named)
            if decision not in ("left", "right"):
                return
            slow, fine = halves if decision == "left" else halves[::-1]
            segment, witnesses, parent = slow.suspects, fine.suspects + witnesses, slow
            if len(segment) == 1:
                return

    def halves(self, segment: Sequence[int], witnesses: Sequence[int]) -> tuple[Group, Group] | None:
        """The segment's two halves as comparable groups (a lone node with a witness, or alone
        when it has ranks to measure and no witness is left), or None."""
        spare = [w for w in witnesses if w not in segment]
        mid = len(segment) // 2
        found = []
        for half in (tuple(segment[:mid]), tuple(segment[mid:])):
            if len(half) > 1:
                found.append(self.group(half))
            elif spare:
                witness = spare.pop(0)
                found.append(self.group((*half, witness), (witness,)))
            elif half and len(self.node_ranks[half[0]]) > 1:
                found.append(self.group(half))
            else:
                return None
        first, second = found
        return (first, second) if first.kind == second.kind else None

    def _pairs(
        self, schedule: Iterator[list[Pair]], seen: set[tuple[int, ...]], named: Callable[[], bool]
    ) -> Iterator[tuple[str, list[Group]]]:
        for pairs in schedule:
            fresh = [p for p in pairs if p not in seen]
            if not fresh:
                continue
            seen |= set(fresh)
            yield "pairs", [self.group(p) for p in fresh]
            if named():
                return

    # judging

    def record(self, number: int, label: str, figures: Sequence[tuple[Group, float, float]]) -> None:
        """A round measured: (group, seconds, busbw) per group."""
        self.measured += [Measured(number, label, g, seconds, busbw) for g, seconds, busbw in figures]

    def slow(self, group: Group) -> bool:
        found = [m for m in self.measured if m.group.ranks == group.ranks]
        return bool(found) and self.verdict(found[-1]) == "slow"

    def verdict(self, m: Measured) -> Literal["slow", "fine", "unjudged"]:
        """Among the groups of its kind measured so far (the whole and groups across nodes together; a
        node alone with nodes alone), sorted by busbw: the slow ones lie below the widest step between
        neighbours, when that step is at least 1/share. A healthy run's groups spread without such a
        step (on the CPU by up to 3x, in small steps), so one fast or slow fluke moves nothing. A group
        with nothing to compare with is unjudged, neither slow nor fine."""
        if m.group.kind == "whole" and self.whole_below:
            return "slow"
        kinds = ("whole", "cross") if m.group.kind != "node" else ("node",)
        values = sorted(x.busbw for x in self.measured if x.group.kind in kinds)
        if len(values) < 2:
            return "unjudged"
        step, below = max((high / low if low > 0 else float("inf"), low) for low, high in pairwise(values))
        return "slow" if step * self.share >= 1 and m.busbw <= below else "fine"

    def decide(self, halves: tuple[Group, Group], parent: Group) -> Decision:
        left, right = (self.slow(h) for h in halves)
        if left != right:
            return "left" if left else "right"
        return "between" if not left and self.slow(parent) else "stop"

    def outcome(self) -> Outcome:
        judged = [(m.group, self.verdict(m)) for m in self.measured]
        slow = [g for g, v in judged if v == "slow"]
        if not slow:
            return Outcome("nothing slow")
        fine = {n for g, v in judged if v == "fine" for n in g.nodes}
        in_every = {n for n in self.nodes if all(n in g.nodes for g in slow)}
        # a node, not one of its links: for each other node, a slow group holds it without that node
        apart = {o for o in self.nodes if any(o not in g.nodes for g in slow)}
        alone = [n for n in sorted(in_every - fine) if apart >= set(self.nodes) - {n}]
        if len(alone) == 1:
            return Outcome("slow node", (alone[0],))
        links = [g.nodes for g in slow if len(g.nodes) == 2 and set(g.nodes) <= fine & in_every]
        if len(links) == 1:
            return Outcome("slow link", links[0])
        left = {n for g in slow for n in g.nodes} - fine
        return Outcome("not localised", tuple(sorted(left)))

    # what to create before the run

    def reachable(self, max_rounds: int) -> list[Group]:
        """Every group some path of the search measures within max_rounds rounds after the whole
        (the whole itself is the world's group): each branch a halving can take, explored."""
        found: dict[tuple[int, ...], Group] = {}
        scripts: list[tuple[Decision, ...]] = [()]
        while scripts:
            chooser = _Scripted(scripts.pop())
            for number, (_, groups) in enumerate(self._rounds(chooser, lambda: False)):
                if number > max_rounds:
                    break
                chooser.round = number
                found.update((g.ranks, g) for g in groups if g.kind != "whole")
            if chooser.open_at is not None and chooser.open_at < max_rounds:
                scripts += [(*chooser.script, b) for b in BRANCHES]
        return sorted(found.values(), key=lambda g: (len(g.ranks), g.ranks))


class _Scripted:
    """Decisions from a script; the first decision past it stops, and is noted as a branch to explore."""

    def __init__(self, script: tuple[Decision, ...]) -> None:
        self.script, self.round = script, 0
        self.used = 0
        self.open_at: int | None = None

    def __call__(self, halves: tuple[Group, Group], parent: Group) -> Decision:
        if self.used < len(self.script):
            self.used += 1
            return self.script[self.used - 1]
        self.open_at = self.round
        return "stop"


def round_robin(nodes: Sequence[int]) -> Iterator[list[Pair]]:
    """Every pair of the nodes once, in rounds of disjoint pairs (the circle method; an odd count sits one out)."""
    ring: list[int | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)
    n = len(ring)
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        yield [_pair(a, b) for a, b in pairs if a is not None and b is not None]
        ring = [ring[0], ring[-1], *ring[1:-1]]


def across(a: Sequence[int], b: Sequence[int]) -> Iterator[list[Pair]]:
    """Every pair with one node in each half, in rounds of disjoint pairs: round r pairs a[i] with b[i + r]."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    for r in range(len(large)):
        yield [_pair(small[i], large[(i + r) % len(large)]) for i in range(len(small))]


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)
