"""The fleet report a terminal shows: the hosts needing attention lead, worst first, with what is wrong and
what to do; a slow host is one row per figure, not one per collective and size; no empty table."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from gpuenv.fleet.report import ReportRequest, fleet_report
from gpuenv.fleet.report_hosts import attention, figure_text
from gpuenv.fleet.report_model import FleetReport
from gpuenv.fleet.stats import Rule
from gpuenv.output import fleet as formats
from gpuenv.output.screen import Table
from tests.fleet import fleet_reports as fr

ROWS, COLUMNS = 40, 120
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_a_terminal(*args: str, rows: int = ROWS, columns: int = COLUMNS) -> str:
    """The real CLI's output in a pseudo-terminal of rows x columns, colours stripped."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = subprocess.Popen([sys.executable, "-m", "gpuenv", *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    child.wait(timeout=120)
    os.close(leader)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def three_problems(folder: Path) -> Path:
    nodes = fr.fleet(1000)
    for size in nodes[17].busbw:  # a slow interconnect: every collective and size
        nodes[17].busbw[size] *= 0.5
    fr.ecc_failure(nodes[412], 2)
    nodes[733].tflops[5] *= 0.7  # one slow GPU
    return fr.write(nodes, folder)


def test_a_thousand_hosts_with_three_problems_fit_the_first_screen(tmp_path: Path) -> None:
    out = in_a_terminal("fleet", "report", "--no-history", str(three_problems(tmp_path / "reports")))
    screen = out.splitlines()[:ROWS]
    assert all(len(line) <= COLUMNS for line in screen)
    first = "\n".join(screen)
    assert screen[0].startswith("1000 host(s): 999 certified, 1 not certified; 2 host(s) with outliers")
    for host, wrong, todo in (
        ("gpu0412", "nvml.ecc_uncorrected on GPU 2", "reset the GPU"),
        ("gpu0017", "allreduce.busbw_gbps (3 values", "check the interconnect"),
        ("gpu0733", "GPU 5 amp.matmul_tflops", "check clocks, power and cooling"),
    ):
        assert host in first and wrong in first and todo in first, first
    hosts = [line.split("│")[1].strip() for line in screen if line.startswith("│") and "gpu0" in line.split("│")[1]]
    assert hosts[:3] == ["gpu0412", "gpu0017", "gpu0733"]  # the failing host first, then the furthest out


def report_of(folder: Path) -> FleetReport:
    return fleet_report(ReportRequest((folder,), Rule(), 5, None))


def test_one_slow_host_is_one_row_per_figure(tmp_path: Path) -> None:
    nodes = fr.fleet(20)
    for size in nodes[3].busbw:
        nodes[3].busbw[size] *= 0.5
    result = report_of(fr.write(nodes, tmp_path))
    assert len(result.outliers) == 3  # every collective and size is still in the JSON
    assert [a.host for a in attention(result)] == ["gpu0003"]
    rows = formats.outlier_rows(result.outliers)
    assert len(rows) == 1 and rows[0][4].startswith("allreduce.busbw_gbps (worst of 3:")
    assert formats.outcome_line(result).endswith("1 host(s) with outliers: fleet NOT healthy")


def test_a_healthy_fleet_prints_no_empty_section(tmp_path: Path) -> None:
    result = report_of(fr.write(fr.fleet(10), tmp_path))
    titles = [b.title for b in formats.screen(result) if isinstance(b, Table)]
    assert titles == ["Figures by group"]
    md = formats.to_markdown(result)
    assert "## Outliers" not in md and "## Hosts needing attention" not in md and "## Failing" not in md


def test_markdown_leads_with_the_hosts_table(tmp_path: Path) -> None:
    nodes = fr.fleet(20)
    fr.ecc_failure(nodes[5], 1)
    md = formats.to_markdown(report_of(fr.write(nodes, tmp_path)))
    assert md.index("## Hosts needing attention") < md.index("## Failing findings")
    assert "| gpu0005 | not certified | nvml.ecc_uncorrected on GPU 1 | reset the GPU" in md


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (182.449, "GB/s", "182.4 GB/s"),
        (36.4, "°C", "36 °C"),
        (0.9049, "J", "0.905 J"),
        (12345.6, "images/s", "12,346 images/s"),
    ],
)
def test_figures_have_units_and_a_fixed_precision(value: float, unit: str, text: str) -> None:
    assert figure_text(value, unit) == text
