"""Rebuild after changing only a file of the user's code, against the first build; target <= 20%.

Starts its own isolated dockerd (the test recipe, stopped by PID at the end), imports the
stand-in base image from the cached bookworm rootfs, and builds the same image as the end-to-end
test (torch 2.13.0 from the cached wheelhouse, an --app project) twice: cold, then after editing
the app's main.py. Needs root, dockerd and the caches of tests/infra/prepare.sh; the first build
uses host networking to reach Debian's archive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.build_image import services  # noqa: E402

CACHE = Path(os.environ.get("GPUENV_TEST_CACHE", "/var/cache/gpuenv-test"))
TARGET = 0.20


def build(env: dict[str, str], app: Path) -> tuple[float, dict[str, object]]:
    command = [
        sys.executable,
        "-m",
        "gpuenv",
        "-q",
        "build-image",
        "--torch",
        "2.13.0",
        "--python",
        "3.11",
        "--os",
        "ubuntu22.04",
        "--with",
        "none",
        "--wheelhouse",
        str(CACHE / "wheelhouse"),
        "--base-image",
        services.STANDIN,
        "--network",
        "host",
        "--app",
        str(app),
        "--tag",
        "gpuenv-bench/rebuild:1",
        "--json",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"build failed ({result.returncode}):\n{result.stderr[-2000:]}")
    out: dict[str, object] = json.loads(result.stdout)
    return elapsed, out


def main() -> int:
    if not services.can_run_dockerd() or not (CACHE / "rootfs" / "bookworm.tar").is_file():
        print("needs root, dockerd and the caches of tests/infra/prepare.sh (run scripts/test.sh once)")
        return 2
    daemon = services.start_dockerd()
    try:
        services.import_standin(daemon.address, CACHE / "rootfs" / "bookworm.tar")
        env = {**os.environ, "DOCKER_HOST": daemon.address}
        with tempfile.TemporaryDirectory() as tmp:
            app = Path(tmp) / "app"
            app.mkdir()
            (app / "main.py").write_text("print('version 1')\n")
            first, first_out = build(env, app)
            (app / "main.py").write_text("print('version 2')\n")
            again, again_out = build(env, app)
    finally:
        daemon.stop()
    ratio = again / first
    same_wheel = first_out["gpuenv_wheel_sha256"] == again_out["gpuenv_wheel_sha256"]
    verdict = "ok" if ratio <= TARGET else "OVER TARGET"
    print(
        f"first build: {first:.1f}s; rebuild after an app edit: {again:.1f}s (cached steps {again_out['cached_steps']})"
    )
    print(f"rebuild/first: ratio {ratio:.3f} (target <= {TARGET}) {verdict}")
    if not same_wheel:
        print("note: gpuenv's own source changed between the builds, so its layer was rebuilt too")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
