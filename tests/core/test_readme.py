"""The README's and docs/' examples are today's output: each block marked `<!-- checked ... -->` runs its
`$ gpuenv` command here and is compared line by line (a line `...` stands for any lines left out, `...`
inside a line for any text, such as the knowledge base's age). The README is a front page: it stays short."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, run_gpuenv

MARK = re.compile(r"^(\s*)<!-- checked\b.*-->\s*$")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_LIMIT = 10 * 1024  # bytes: what gpuenv is, install, the Quick start, an example per command


@dataclass(frozen=True)
class Example:
    where: str  # page:line where the block starts
    command: list[str]
    expected: list[str]


def examples(text: str, page: str = "README.md") -> list[Example]:
    lines, found = text.splitlines(), []
    for n, line in enumerate(lines):
        mark = MARK.match(line)
        if not mark:
            continue
        indent, fence = len(mark.group(1)), n + 1
        assert lines[fence].strip() == "```console", f"{page}:{fence + 1}: a checked block is ```console"
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```")
        body = [raw[indent:].rstrip() for raw in lines[fence + 1 : end]]
        assert body[0].startswith("$ gpuenv "), f"{page}:{fence + 2}: a checked block starts with $ gpuenv"
        found.append(Example(f"{page}:{fence + 1}", shlex.split(body[0])[2:], body[1:]))
    return found


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether actual is expected, a line `...` standing for any lines, `...` in a line for any text."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    pattern = ".*".join(map(re.escape, head.split("...")))
    return bool(actual) and re.fullmatch(pattern, actual[0]) is not None and matches(rest, actual[1:])


README = (REPO / "README.md").read_text(encoding="utf-8")
EXAMPLES = [e for page in PAGES for e in examples(page.read_text(encoding="utf-8"), str(page.relative_to(REPO)))]


def test_the_pages_have_checked_examples() -> None:
    assert len(EXAMPLES) >= 7
    assert examples(README), "the README's own examples are checked too"
    assert matches(["a", "...", "d (...)"], ["a", "b", "c", "d (2 days old)"])
    assert not matches(["a", "d"], ["a", "b", "d"])


def test_the_readme_is_a_front_page() -> None:
    size = len(README.encode("utf-8"))
    assert size <= README_LIMIT, f"README.md is {size} bytes: the manual goes in docs/, the README links to it"


def test_the_readme_links_only_to_pages_that_exist() -> None:
    targets = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]+)?\)", README)
    assert targets
    assert [t for t in targets if not (REPO / t).is_file()] == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.where} " + " ".join(e.command))
def test_an_example_is_todays_output(example: Example, tmp_path: Path) -> None:
    done = run_gpuenv(*example.command, cwd=tmp_path, env={"COLUMNS": "200"})
    actual = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
    assert matches(example.expected, actual), (
        f"{example.where}: `gpuenv {shlex.join(example.command)}` now prints:\n" + "\n".join(actual)
    )
