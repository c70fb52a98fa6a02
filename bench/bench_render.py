"""`gpuenv build-image --render-only` against `python -c "import click, jinja2"`; target ratio <= 2.5.

Two measurements, interleaved with the floor:
- render-only CLI: `gpuenv build-image --spec <seed> --render-only DIR --force`, the whole command a
  user runs: resolving, rendering, writing the context and copying gpuenv's own wheel from its cache
  (the first, warm-up run builds it); this is the target.
- render-all: one process resolves and renders every images/*.toml (what the golden test and a
  CI job regenerating images/ do); reported alongside.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from timing import compile_package, medians, report

RENDER_ALL = (
    "from gpuenv.image.plan import BuildRequest, plan_image\n"
    "from gpuenv.render.dockerfile import render_image\n"
    "from gpuenv.render.images import curated_specs\n"
    "specs = curated_specs()\n"
    "assert len(specs) >= 3\n"
    "for spec in specs:\n"
    "    plan = plan_image(BuildRequest(spec=str(spec)), kb_path=None)\n"
    "    render_image(plan.stack, plan.options, plan.os_info)\n"
)


def main() -> int:
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "ctx"
        cli = [
            sys.executable,
            "-m",
            "gpuenv",
            "build-image",
            "--spec",
            "cu117-cudnn-ubuntu20.04",
            "--render-only",
            str(dest),
            "--force",
        ]
        times = medians(
            {
                "render-all": [sys.executable, "-c", RENDER_ALL],
                "cli": cli,
                "floor": [sys.executable, "-c", "import click, jinja2"],
            },
            runs=15,
        )
    ok = report("build-image --spec cu117-cudnn-ubuntu20.04 --render-only", times["cli"], times["floor"], target=2.5)
    report("render all curated images (informational)", times["render-all"], times["floor"], target=2.5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
