"""`gpuenv resolve --cuda 11.7 --json` against `python -c "import click, jinja2"`; target ratio ≤ 2.0."""

from __future__ import annotations

import sys

from timing import compile_package, medians, report


def main() -> int:
    compile_package()
    times = medians(
        {
            "resolve": [sys.executable, "-m", "gpuenv", "resolve", "--cuda", "11.7", "--json"],
            "floor": [sys.executable, "-c", "import click, jinja2"],
        },
        runs=15,
    )
    ok = report("resolve --cuda 11.7 --json", times["resolve"], times["floor"], target=2.0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
