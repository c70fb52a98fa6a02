"""Installed versions read from metadata files agree with importlib.metadata, without its import."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from gpuenv.installed import installed_version, normalized


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it() -> None:
    names = {dist.metadata["Name"] for dist in metadata.distributions()}
    assert len(names) > 20  # the venv's own packages: pytest, click, packaging, ...
    for name in sorted(names):
        assert installed_version(name) == metadata.version(name), name


def test_names_match_whatever_their_spelling() -> None:
    assert normalized("Nvidia.ML-py") == "nvidia_ml_py"
    assert installed_version("Typing-Extensions") == metadata.version("typing_extensions")


def test_a_package_not_installed_has_no_version() -> None:
    assert installed_version("no-such-package-gpuenv-test") is None


def test_the_first_path_entry_wins_and_egg_info_counts(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "demo_pkg-2.0.dist-info").mkdir(parents=True)
    (first / "demo_pkg-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 2.0\n")
    (second / "Demo.Pkg.egg-info").mkdir(parents=True)
    (second / "Demo.Pkg.egg-info" / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: Demo.Pkg\nVersion: 1.5.dev0\n")
    assert installed_version("demo-pkg", [str(first), str(second)]) == "2.0"
    assert installed_version("demo-pkg", [str(tmp_path / "missing"), str(second)]) == "1.5.dev0"


def test_the_body_after_the_headers_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "body_pkg-0.1.dist-info").mkdir()
    (tmp_path / "body_pkg-0.1.dist-info" / "METADATA").write_text("Name: body-pkg\n\nVersion: 9.9\n")
    assert installed_version("body-pkg", [str(tmp_path)]) is None


def test_reading_versions_imports_no_importlib_metadata() -> None:
    code = "import sys, gpuenv.installed as i; i.installed_version('click'); print('importlib.metadata' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert proc.stdout.strip() == "False"
