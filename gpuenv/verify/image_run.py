"""`gpuenv verify --image TAG`: the same verify inside a Docker image, through the Docker SDK, its
report read back and costed at the host's price (loaded only for --image: gpuenv/verify/service.py)."""

from __future__ import annotations

from gpuenv.adapters.docker import run_verify_in_image
from gpuenv.errors import BadResult, CannotRun
from gpuenv.files import write_output
from gpuenv.output.jsontext import json_text
from gpuenv.verify.launch import host_os
from gpuenv.verify.model import readable
from gpuenv.verify.service import VerifyOutcome, VerifyRequest, cost_of

IMAGE_BUDGET = 10  # inside an image: this many times the per-check limit for the whole run


def image_args(request: VerifyRequest) -> list[str]:
    """The options passed on to the verify inside the image (files stay on the host)."""
    args: list[str] = []
    for name in request.checks:
        args += ["--check", name]
    if request.expect_gpus:
        args += ["--expect-gpus", str(request.expect_gpus)]
    if request.strict:
        args.append("--strict")
    if request.timeout:
        args += ["--timeout", str(request.timeout)]
    return args


def run_in_image(request: VerifyRequest) -> VerifyOutcome:
    """`gpuenv verify --image TAG`: the same verify inside the image, its report at the host's price."""
    tag = str(request.image)
    budget = (request.timeout or 600.0) * IMAGE_BUDGET
    heard: list[str] = []  # what the run says beside the report (on the CPU: no GPU for containers)
    code, data = run_verify_in_image(
        tag,
        level=request.level,
        device=request.device,
        timeout=budget,
        extra_args=image_args(request),
        on_note=heard.append,
    )
    if data is not None and not readable(data):
        raise BadResult(
            f"verify inside {tag} wrote a report of schema {data.get('schema')!r}, which this gpuenv cannot read",
            hint="use the same gpuenv version on the host and in the image",
        )
    if data is None:
        if code in (0, 1):
            raise BadResult(
                f"verify inside {tag} gave no report (exit {code})",
                hint=f"run it by hand: docker run --rm {tag} gpuenv verify",
            )
        raise CannotRun(
            f"verify could not run inside {tag} (exit {code})",
            hint="is gpuenv[verify] installed in the image? (gpuenv build-image installs it)",
        )
    if request.instance_type is not None:
        data.setdefault("host", {})["instance_type"] = request.instance_type
    if isinstance(data.get("host"), dict):  # the host's OS, which verify inside the image cannot see
        data["host"].update(host_os())
    cost, notes = cost_of(request, data.get("host") or {}, lambda: data)
    if cost is not None:  # the image's figures, at the host's price
        data["cost"] = cost
    if request.report is not None:
        write_output(request.report, json_text(data))
    return VerifyOutcome(code, image_report=data, notes=(*heard, *notes))
