"""`gpuenv fleet report --html`: one self-contained page, opened in real headless Chromium."""

from __future__ import annotations

import base64
import importlib.util
import io
import re
import shutil
import sys
from pathlib import Path

import pytest

from gpuenv import output
from gpuenv.errors import CannotRun
from gpuenv.fleet.report import FleetReport, ReportRequest, fleet_report
from tests.conftest import gpuenv_main, require
from tests.fleet import fleet_reports as fr

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def needs_matplotlib() -> None:
    require(HAS_MATPLOTLIB, "matplotlib is not installed (pip install -e '.[report]')")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> FleetReport:
    nodes = fr.fleet(24, seed=9)
    nodes[4].busbw[("allreduce", 512 * fr.MiB)] *= 0.75
    nodes[9].tflops[3] *= 0.8
    fr.ecc_failure(nodes[13], 1)
    folder = fr.write(nodes, tmp_path_factory.mktemp("reports"))
    return fleet_report(ReportRequest((folder,)))


@pytest.fixture(scope="module")
def page(planted: FleetReport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_matplotlib()
    path = tmp_path_factory.mktemp("html") / "fleet.html"
    path.write_text(output.text("fleet", "html", planted), encoding="utf-8")
    return path


def test_the_page_holds_its_plots_and_fetches_nothing(page: Path, planted: FleetReport) -> None:
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    assert "default-src 'none'" in text  # the page may not ask for anything itself
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == len(fr.SIZES) + 1  # a histogram per collective and size, TFLOP/s by host
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", text)
    for host in planted.hosts:
        assert f"<td>{host.host}</td>" in text
    assert "<td>GPU-gpu0009-3</td>" in text and "<td>nvml.ecc_uncorrected</td>" in text


def test_html_without_matplotlib_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(CannotRun, match="--html needs matplotlib") as info:
        output.require("fleet", "html")
    assert info.value.exit_code == 3 and info.value.hint == "pip install 'gpuenv[report]'"


def _non_white_share(png: bytes) -> float:
    from PIL import Image

    counts = Image.open(io.BytesIO(png)).convert("L").histogram()  # pixels per grey level
    return sum(counts[:230]) / sum(counts)


@pytest.mark.integration
def test_chromium_shows_the_page_without_error_and_sorts_the_table(page: Path) -> None:
    require(Path(CHROMIUM).exists(), "no chromium (apt-get install chromium)")
    require(importlib.util.find_spec("playwright") is not None, "playwright is not installed (the test extra)")
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=60_000)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            tab.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
            tab.on("request", lambda r: requests.append(r.url))
            tab.goto(page.as_uri(), wait_until="load", timeout=60_000)
            sizes = tab.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
            plot = tab.locator("figure img").first.screenshot()
            whole = tab.screenshot(full_page=True)
            hosts = tab.locator("#hosts tbody tr td:first-child")
            before = hosts.all_inner_texts()
            tab.locator("#hosts th", has_text="host").first.click()
            tab.locator("#hosts th", has_text="host").first.click()  # second click: descending
            after = hosts.all_inner_texts()
        finally:
            browser.close()
    assert problems == []
    assert all(url == page.as_uri() or url.startswith("data:") for url in requests), requests
    assert len(sizes) == len(fr.SIZES) + 1 and all(done and w > 300 and h > 150 for done, w, h in sizes)
    assert _non_white_share(plot) > 0.03  # bars and axes drawn, not a blank image
    assert _non_white_share(whole) > 0.01
    assert after == sorted(before, reverse=True) and before == sorted(before)


def test_the_page_puts_node_kinds_costs_side_by_side(tmp_path: Path) -> None:
    needs_matplotlib()
    h100 = fr.fleet(3)
    a100 = fr.fleet(2, prefix="a", seed=2, model="NVIDIA A100-SXM4-80GB")
    folder = fr.write(h100 + a100, tmp_path / "r")
    config = tmp_path / "config.toml"
    config.write_text("[prices]\nH100 = 2.5\n")
    page = tmp_path / "fleet.html"
    args = ["--config", str(config), "fleet", "report", str(folder), "--no-history", "--html", str(page)]
    assert gpuenv_main(*args) == 0
    text = page.read_text(encoding="utf-8")
    assert "<h2>Cost by node kind (USD, certified hosts)</h2>" in text
    assert f"<td>8 × {fr.H100}</td><td>3</td><td>20</td>" in text
    assert "<p>cost: 8 × NVIDIA A100-SXM4-80GB: no price in [prices]" in text
