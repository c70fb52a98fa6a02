"""Render a planned image and, through the Docker adapter, build, tag, push and certify it."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuenv.adapters import docker as adapter
from gpuenv.adapters.docker import run_verify_in_image
from gpuenv.adapters.docker_gpus import RUN_BY_HAND
from gpuenv.errors import BadResult
from gpuenv.image.plan import Plan
from gpuenv.render.context import WHEEL_DIR, write_context
from gpuenv.render.dockerfile import RenderedImage, render_image

VERIFY_TIMEOUT = 1800.0
Say = Callable[[str], None]


@dataclass(frozen=True)
class Prepared:
    """A plan with its rendered files; client is the connected Docker client when a build follows."""

    plan: Plan
    rendered: RenderedImage
    client: Any = None

    def messages(self) -> list[str]:
        """What the user should know before the build: the base image, notes and warnings."""
        lines = [f"base image: {self.rendered.base_image}", *(f"note: {note}" for note in self.rendered.notes)]
        lines += [f"warning: {warning}" for warning in self.rendered.warnings]
        if self.plan.stack.base_image_eol and "@sha256:" not in self.rendered.base_image:
            lines.append(
                "warning: pin the base by digest while it still exists: add --pin-base, or "
                "--base-image REF@sha256:<digest> from your mirror"
            )
        return lines


@dataclass(frozen=True)
class Written:
    """What --render-only wrote."""

    dest: Path
    files: list[str]

    def to_dict(self, prepared: Prepared) -> dict[str, Any]:
        rendered, plan = prepared.rendered, prepared.plan
        return {
            "rendered": str(self.dest),
            "files": self.files,
            "base_image": rendered.base_image,
            "tags": list(plan.tags),
            "labels": rendered.labels,
            "notes": list(rendered.notes),
            "warnings": list(rendered.warnings),
            "stack": plan.stack.to_dict(),
        }


@dataclass(frozen=True)
class Built:
    """The built image: ids, tags, the steps Docker ran or reused, pushes and the verify run."""

    image_id: str
    info: dict[str, Any]
    steps: int
    instructions: dict[int, str]
    cached_steps: list[int]
    wheel_sha256: str
    pushed: dict[str, str] = field(default_factory=dict)
    verify: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return 1 if self.verify is not None and self.verify["exit_code"] != 0 else 0

    def to_dict(self, prepared: Prepared) -> dict[str, Any]:
        return {
            "image_id": self.image_id,
            "tags": list(prepared.plan.tags),
            "size": self.info.get("Size"),
            "base_image": prepared.rendered.base_image,
            "labels": (self.info.get("Config") or {}).get("Labels") or {},
            "steps": self.steps,
            "instructions": self.instructions,
            "cached_steps": self.cached_steps,
            "pushed": self.pushed,
            "verify": self.verify,
            "gpuenv_wheel_sha256": self.wheel_sha256,
            "notes": list(prepared.rendered.notes),
            "warnings": list(prepared.rendered.warnings),
            "stack": prepared.plan.stack.to_dict(),
        }


def prepare(plan: Plan) -> Prepared:
    """Render first (a bad request fails here, before Docker is asked), then connect and pin the base if asked."""
    rendered = render_image(plan.stack, plan.options, plan.os_info)
    if plan.request.render_dir is not None and not plan.request.pin_base:
        return Prepared(plan, rendered)

    client = adapter.connect()
    if plan.request.pin_base:
        pinned = adapter.pin_digest(client, rendered.base_image)
        plan = replace(plan, options=replace(plan.options, base_image=pinned))
        rendered = render_image(plan.stack, plan.options, plan.os_info)
    return Prepared(plan, rendered, client)


def write_rendered(prepared: Prepared) -> Written:
    """--render-only: the Dockerfile and build context into the request's directory."""

    plan, dest = prepared.plan, prepared.plan.request.render_dir
    assert dest is not None
    wheelhouse, app, force = plan.request.wheelhouse, plan.request.app, plan.request.force
    return Written(dest, write_context(prepared.rendered, dest, wheelhouse=wheelhouse, app=app, force=force))


def build(prepared: Prepared, *, on_event: Callable[[Any], None], say: Say) -> Built:
    """Build in a temporary context, tag, push and verify as the plan asks; BadResult when a step fails."""
    plan, client, request = prepared.plan, prepared.client, prepared.plan.request
    with tempfile.TemporaryDirectory(prefix="gpuenv-build-") as tmp:
        context = Path(tmp) / "context"
        write_context(prepared.rendered, context, wheelhouse=request.wheelhouse, app=request.app)
        result = adapter.build(
            client,
            context,
            tag=plan.tags[0],
            buildargs=plan.buildargs,
            nocache=request.no_cache,
            network_mode=None if request.network == "default" else request.network,
            platform=plan.docker_platform,
            on_event=on_event,
        )
        wheel_sha256 = _wheel_digest(context)
    for extra in plan.tags[1:]:
        adapter.tag(client, result.image_id, extra)
    info = adapter.inspect(client, result.image_id)
    say(f"built {result.image_id[:19]} as {', '.join(plan.tags)} ({info.get('Size', 0) / 1e6:.0f} MB)")
    pushed = {ref: adapter.push(client, ref) for ref in plan.tags} if request.push else {}
    for ref, digest in pushed.items():
        say(f"pushed {ref}: {digest}")
    verify = _verify(plan.tags[0], plan.stack.platform, say) if request.verify else None
    steps = (result.steps, result.instructions, result.cached_steps)
    return Built(result.image_id, info, *steps, wheel_sha256=wheel_sha256, pushed=pushed, verify=verify)


def _wheel_digest(context: Path) -> str:
    """sha256 of the gpuenv wheel in the context: when it is unchanged, Docker reuses its layer."""

    wheel = next((context / WHEEL_DIR).glob("gpuenv-*.whl"))
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def _verify(image: str, platform: str, say: Say) -> dict[str, Any]:
    """gpuenv verify inside the new image, given the host's GPUs the way its platform (cuda, rocm) needs."""
    say(f"verifying {image}: gpuenv verify --level quick inside it")
    warn: Say = lambda text: say(f"warning: {text}")  # noqa: E731
    code, report = run_verify_in_image(
        image, level="quick", device="auto", timeout=VERIFY_TIMEOUT, extra_args=[], on_note=warn, platform=platform
    )
    if code not in (0, 1):
        by_hand = RUN_BY_HAND.get(platform, RUN_BY_HAND["cuda"])  # a CPU stack's image runs as a CUDA one
        raise BadResult(f"gpuenv verify inside {image} could not run (exit {code})", hint=f"run it by hand: {by_hand}")
    say(f"verify: {'passed' if code == 0 else 'FAILED'} (exit {code})")
    return {"exit_code": code, "report": report}
