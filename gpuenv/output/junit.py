"""A verify report as JUnit XML, for CI systems (registered in gpuenv.output.FORMATS). Apart from
the other verify renderers so that only a run asked for --junit imports the XML library."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from gpuenv.verify.model import Report


def to_junit(report: Report) -> str:
    """One testsuite, one testcase per check; fail -> <failure>, timeout/crash/error -> <error>."""
    data = report.to_dict()
    suite = ET.Element(
        "testsuite",
        {
            "name": f"gpuenv verify {report.level}",
            "tests": str(len(report.checks)),
            "failures": str(sum(c.status == "fail" for c in report.checks)),
            "errors": str(sum(c.status in ("timeout", "crash", "error") for c in report.checks)),
            "skipped": str(sum(c.status == "skip" for c in report.checks)),
            "time": f"{sum(c.duration_s for c in report.checks):.3f}",
            "hostname": str(data["host"].get("hostname", "")),
            "timestamp": report.started,
        },
    )
    for check in report.checks:
        case = ET.SubElement(
            suite, "testcase", {"classname": "gpuenv.verify", "name": check.name, "time": f"{check.duration_s:.3f}"}
        )
        lines = [
            f"[{f.severity}] {f.message}" + (f" -> {f.remediation}" if f.remediation else "") for f in check.findings
        ]
        body = "\n".join(lines + ([check.detail.get("stderr_tail", "")] if check.detail.get("stderr_tail") else []))
        if check.status == "fail":
            ET.SubElement(case, "failure", {"message": check.summary, "type": "fail"}).text = body
        elif check.status in ("timeout", "crash", "error"):
            ET.SubElement(case, "error", {"message": check.summary, "type": check.status}).text = body
        elif check.status == "skip":
            ET.SubElement(case, "skipped", {"message": check.summary})
        else:
            ET.SubElement(case, "system-out").text = "\n".join([check.summary, *lines])
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
