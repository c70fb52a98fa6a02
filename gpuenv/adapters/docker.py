"""The Docker adapter: builds, pushes, pins and runs images through the Docker SDK.

The SDK is imported only inside these functions. Errors are mapped once, here: a daemon that
cannot be reached is CannotRun (exit 3); a failing build step, a push the registry refuses or an
image that fails its checks is BadResult (exit 1).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv.adapters import docker_gpus as gpu_access
from gpuenv.errors import BadRequest, BadResult, CannotRun
from gpuenv.extras import needed
from gpuenv.types import DEVICE_CHOICES, DeviceChoice, Level

API_TIMEOUT = 60.0  # seconds for an ordinary API call
BUILD_TIMEOUT = 7200.0  # seconds without a word from the daemon before a build is given up
TAIL_LINES = 25
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_PULL_FAILED = ("pull access denied", "manifest unknown")  # a build error that means: no base image

DAEMON_HINT = (
    "start Docker (systemctl start docker) or point DOCKER_HOST at a running daemon; "
    "--render-only DIR writes the build context without Docker"
)


@dataclass(frozen=True)
class BuildEvent:
    """One thing worth showing while a build runs: a new step, a line of output, or a cache hit."""

    kind: str  # "step" | "output" | "cached"
    text: str
    step: int = 0
    total: int = 0


@dataclass
class BuildResult:
    image_id: str
    steps: int
    cached_steps: list[int] = field(default_factory=list)
    instructions: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    gpus: bool


# --- connecting ----------------------------------------------------------------------------------


def connect(*, timeout: float = API_TIMEOUT) -> Any:
    """A DockerClient that has answered a ping, or CannotRun."""
    with needed("docker", "talking to the Docker daemon"):
        import docker  # the Docker SDK (extra docker): loaded when a call is made
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests' errors or OSError here
        raise CannotRun(f"cannot reach the Docker daemon: {_short(exc)}", hint=DAEMON_HINT) from exc
    return client


@contextlib.contextmanager
def _daemon_errors(what: str) -> Iterator[None]:
    """Turn a lost connection mid-call into CannotRun; let gpuenv's own errors through."""
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made
    import requests  # the Docker SDK\'s HTTP client: slow to import, needed only with it

    try:
        yield
    except (requests.exceptions.ConnectionError, ConnectionError) as exc:
        raise CannotRun(f"lost the Docker daemon while {what}: {_short(exc)}", hint=DAEMON_HINT) from exc
    except docker.errors.APIError as exc:
        raise BadResult(f"Docker refused {what}: {_short(exc)}", hint="see the daemon's message above") from exc


# --- building ------------------------------------------------------------------------------------


def build(
    client: Any,
    context: Path,
    *,
    tag: str | None,
    buildargs: dict[str, str] | None = None,
    nocache: bool = False,
    network_mode: str | None = None,
    platform: str | None = None,
    timeout: float = BUILD_TIMEOUT,
    on_event: Callable[[BuildEvent], None] | None = None,
) -> BuildResult:
    """Build CONTEXT/Dockerfile with the low-level streaming API; BadResult names a failing step."""
    import requests  # the Docker SDK\'s HTTP client: slow to import, needed only with it

    emit = on_event or (lambda event: None)
    result = BuildResult(image_id="", steps=0)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    api = client.api
    old_timeout = api.timeout
    api.timeout = timeout
    try:
        with _daemon_errors("building the image"):
            stream = api.build(
                path=str(context),
                tag=tag,
                buildargs=buildargs or {},
                nocache=nocache,
                rm=True,
                forcerm=True,
                decode=True,
                network_mode=network_mode,
                platform=platform,  # "linux/arm64": the stack's CPU, whatever the daemon's own
            )
            for chunk in stream:
                _take(chunk, result, tail, emit)
    except requests.exceptions.ReadTimeout as exc:
        raise BadResult(
            f"the build said nothing for {timeout:.0f} s at step {result.steps}: {_step_text(result)}",
            hint="last lines:\n" + "\n".join(tail),
        ) from exc
    finally:
        api.timeout = old_timeout
    if not result.image_id:
        raise BadResult("the build ended without an image", hint="last lines:\n" + "\n".join(tail))
    return result


def _take(chunk: dict[str, Any], result: BuildResult, tail: deque[str], emit: Callable[[BuildEvent], None]) -> None:
    if "error" in chunk:
        _fail(chunk, result, tail)
    if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
        result.image_id = chunk["aux"]["ID"]
    text = chunk.get("stream") or chunk.get("status") or ""
    for line in text.splitlines():
        line = line.rstrip()
        step = _STEP.match(line)
        if step:
            result.steps = int(step.group(1))
            result.instructions[result.steps] = step.group(3)
            tail.clear()
            emit(BuildEvent("step", step.group(3), result.steps, int(step.group(2))))
        elif line.strip() == "---> Using cache":
            result.cached_steps.append(result.steps)
            emit(BuildEvent("cached", line.strip(), result.steps))
        elif line.strip():
            tail.append(line)
            emit(BuildEvent("output", line, result.steps))
            found = re.match(r"^Successfully built ([0-9a-f]{12,64})$", line.strip())
            if found and not result.image_id:
                result.image_id = found.group(1)


def _fail(chunk: dict[str, Any], result: BuildResult, tail: deque[str]) -> None:
    message = str(chunk.get("errorDetail", {}).get("message") or chunk["error"]).strip()
    instruction = _step_text(result)
    lines = "\n".join(f"  | {line}" for line in tail) or "  | (no output)"
    hint = "rerun with -v for the whole log; --no-cache rebuilds every step"
    if instruction.upper().startswith("FROM") or any(s in message.lower() for s in _PULL_FAILED):
        hint = (
            "the base image cannot be pulled: mirror it and pass --base-image REGISTRY/IMAGE, "
            "or pin a digest that still exists (end-of-life nvidia/cuda tags are deleted)"
        )
    raise BadResult(f"build step {result.steps} failed: {instruction}\n{message}\nlast lines:\n{lines}", hint=hint)


def _step_text(result: BuildResult) -> str:
    return result.instructions.get(result.steps, "(before the first step)")


# --- inspecting, pushing, pinning ----------------------------------------------------------------


def inspect(client: Any, image: str) -> dict[str, Any]:
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    with _daemon_errors(f"inspecting {image}"):
        try:
            info: dict[str, Any] = client.api.inspect_image(image)
        except docker.errors.ImageNotFound as exc:
            hint = "build it first, or check the name"
            raise BadRequest(f"no image {image} in the Docker daemon", hint=hint) from exc
    return info


def tag(client: Any, image_id: str, ref: str) -> None:
    repository, _, version = _split_tag(ref)
    with _daemon_errors(f"tagging {ref}"):
        client.api.tag(image_id, repository, version or "latest")


def push(client: Any, ref: str, *, timeout: float = BUILD_TIMEOUT) -> str:
    """Push one tag; returns the digest the registry gave it."""
    repository, _, version = _split_tag(ref)
    digest = ""
    api = client.api
    old_timeout = api.timeout
    api.timeout = timeout
    try:
        with _daemon_errors(f"pushing {ref}"):
            for chunk in api.push(repository, tag=version or "latest", stream=True, decode=True):
                if "error" in chunk:
                    raise BadResult(
                        f"push of {ref} failed: {chunk['error']}",
                        hint="check the registry address and that you are logged in (docker login)",
                    )
                aux = chunk.get("aux")
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
    finally:
        api.timeout = old_timeout
    if not digest:
        raise BadResult(f"the registry gave no digest for {ref}", hint="check the registry's log")
    return digest


def pin_digest(client: Any, ref: str) -> str:
    """REF with the registry's current digest appended ('repo:tag@sha256:...')."""
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    if "@sha256:" in ref:
        return ref
    try:
        with _daemon_errors(f"looking up the digest of {ref}"):
            digest = str(client.api.inspect_distribution(ref)["Descriptor"]["digest"])
    except (BadResult, docker.errors.APIError) as exc:
        local = _local_digest(client, ref)
        if local is None:
            raise BadResult(
                f"cannot pin {ref} by digest: the registry does not answer for it ({exc})",
                hint="pin it by hand with --base-image REF@sha256:<digest>, or mirror it first",
            ) from exc
        digest = local
    return f"{ref}@{digest}"


def _local_digest(client: Any, ref: str) -> str | None:
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    try:
        info = client.api.inspect_image(ref)
    except docker.errors.APIError:
        return None
    repository = _split_tag(ref)[0]
    for entry in info.get("RepoDigests") or []:
        name, _, digest = str(entry).partition("@")
        if name == repository and digest:
            return digest
    return None


def _split_tag(ref: str) -> tuple[str, str, str]:
    """('registry:5000/repo', ':', 'tag'); the registry's port is not a tag."""
    base = ref.split("@", 1)[0]
    head, sep, last = base.rpartition(":")
    if sep and "/" not in last:
        return head, sep, last
    return base, "", ""


# --- running an image ----------------------------------------------------------------------------


def run_in_image(
    client: Any,
    image: str,
    command: list[str],
    *,
    gpus: bool,
    timeout: float,
    network_mode: str = "none",
    platform: str = "cuda",
    device_groups: tuple[int, ...] = (),
) -> RunResult:
    """Run COMMAND in a new container of IMAGE and remove it; the wait is bounded by TIMEOUT.

    With gpus, every GPU of the host is given to it the way its platform needs (docker_gpus), with
    the host's IPC namespace, which NCCL and RCCL need for their shared memory.
    """
    options: dict[str, Any] = {"network_mode": network_mode, "detach": True}
    if gpus:
        options.update(gpu_access.gpu_run_options(platform, device_groups=device_groups))
    container = _create(client, image, command, options)
    try:
        with _daemon_errors(f"starting a container of {image}"):
            container.start()
        status = _wait(container, timeout, image)
        with _daemon_errors("reading the container's output"):
            stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return RunResult(status, stdout, stderr, gpus)
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def _create(client: Any, image: str, command: list[str], options: dict[str, Any]) -> Any:
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    with _daemon_errors(f"creating a container of {image}"):
        try:
            return client.containers.create(image, command=command, **options)
        except docker.errors.ImageNotFound:
            _pull(client, image)
            return client.containers.create(image, command=command, **options)


def _pull(client: Any, image: str) -> None:
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    try:
        client.images.pull(image)
    except docker.errors.APIError as exc:
        message = f"no image {image}, here or in its registry: {_short(exc)}"
        raise BadRequest(message, hint="check the name and tag") from exc


def _wait(container: Any, timeout: float, image: str) -> int:
    import requests  # the Docker SDK\'s HTTP client: slow to import, needed only with it

    try:
        status = container.wait(timeout=timeout)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
        with contextlib.suppress(Exception):
            container.kill()
        tail = container.logs(tail=TAIL_LINES).decode(errors="replace") if container else ""
        raise BadResult(
            f"the container of {image} ran past {timeout:.0f} s and was stopped",
            hint="last lines:\n" + tail if tail.strip() else "raise --timeout if the checks need longer",
        ) from exc
    return int(status.get("StatusCode", 1))


def run_verify_in_image(
    tag: str,
    *,
    level: Level,
    device: DeviceChoice,
    timeout: float,
    extra_args: list[str],
    on_note: Callable[[str], None],
    platform: str | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Run `gpuenv verify --level LEVEL --json` inside image TAG; (exit code, parsed report).

    device "auto" gives the container every GPU and, when the host has none (or Docker cannot hand
    them out), runs on the CPU and says so; "cuda" insists on GPUs; "cpu" never asks for them.
    platform ("cuda" or "rocm") says how GPUs are handed over; None reads it from the image's labels.
    The report, when stdout holds one, gains an "image_run" entry saying how it was run.
    """
    if device not in DEVICE_CHOICES:
        raise BadRequest(f"unknown device {device!r}", hint="auto, cuda or cpu")
    client = connect()
    command = ["gpuenv", "verify", "--level", level, "--json"]
    result: RunResult | None = None
    if device in ("auto", "cuda"):
        platform = platform or gpu_access.platform_of(image_config(tag, client)[0])
        gpus = _on_gpus(client, tag, [*command, "--device", device, *extra_args], platform=platform, timeout=timeout)
        if isinstance(gpus, str) and device == "cuda":
            raise CannotRun(f"Docker cannot give containers GPUs here: {gpus}", hint=gpu_access.no_gpu_hint(platform))
        if isinstance(gpus, str):
            reason = gpu_access.short_reason(gpus)
            on_note(f"no GPUs available to containers on this host ({reason}): verifying {tag} on the CPU")
        result = gpus if isinstance(gpus, RunResult) else None
    if result is None:
        try:
            result = run_in_image(client, tag, [*command, "--device", "cpu", *extra_args], gpus=False, timeout=timeout)
        except BadResult as exc:
            _no_gpuenv(exc, tag)
            raise
    if result.exit_code in (126, 127):
        raise BadResult(
            f"image {tag} has no working gpuenv: {result.stderr.strip()[-300:]}",
            hint="build it with gpuenv build-image, which installs gpuenv in the image",
        )
    report = _parse_report(result.stdout)
    if report is not None:
        report["image_run"] = {"image": tag, "gpus": result.gpus, "device": device if result.gpus else "cpu"}
    return result.exit_code, report


def _on_gpus(client: Any, tag: str, command: list[str], *, platform: str, timeout: float) -> RunResult | str:
    """The run with the host's GPUs, or why the host cannot give containers any."""
    groups = gpu_access.device_groups_of_daemon() if platform == gpu_access.ROCM else ()
    if groups is None:
        return gpu_access.NO_KFD
    try:
        return run_in_image(client, tag, command, gpus=True, timeout=timeout, platform=platform, device_groups=groups)
    except BadResult as exc:
        _no_gpuenv(exc, tag)
        if gpu_access.no_gpu_reason(exc.message) is None:
            raise
        return exc.message


def image_config(tag: str, client: Any = None) -> tuple[dict[str, str], str | None]:
    """An image's labels and CPU architecture (Docker's name: amd64), pulling it first when the daemon lacks it."""
    import docker.errors  # the Docker SDK (extra docker): loaded when a call is made

    client = client or connect()
    with _daemon_errors(f"inspecting {tag}"):
        try:
            info: dict[str, Any] = client.api.inspect_image(tag)
        except docker.errors.ImageNotFound:
            _pull(client, tag)
            info = client.api.inspect_image(tag)
    architecture = info.get("Architecture")
    return dict((info.get("Config") or {}).get("Labels") or {}), architecture if isinstance(architecture, str) else None


def _no_gpuenv(exc: BadResult, tag: str) -> None:
    if "executable file not found" in exc.message:
        raise BadResult(
            f"image {tag} has no gpuenv on its PATH",
            hint="build it with gpuenv build-image, which installs gpuenv in the image",
        ) from exc


def _parse_report(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    start = text.find("{")
    if start < 0:
        return None
    try:
        report = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    return report if isinstance(report, dict) else None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
