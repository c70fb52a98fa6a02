"""Where this verify stands in a run across nodes: which launcher started it, its rank(s), the rendezvous.

Pure: the environment and the explicit flags in, a `Placement` out (or None for a run on this node
alone). Launchers recognised:

- srun: one task per GPU; SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the rendezvous host is the first
  node of SLURM_STEP_NODELIST (SLURM_JOB_NODELIST), expanded with python-hostlist (`gpuenv[slurm]`);
- torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (its agent may host the store);
- explicit: `--nnodes/--node-rank/--master-addr[/--master-port]` where no launcher is present (the
  form `gpuenv fleet verify --multi-node` uses): this process starts one rank per local device.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from gpuenv.errors import BadRequest
from gpuenv.extras import needed
from gpuenv.verify.pci import pci_scope

LauncherChoice = Literal["auto", "srun", "torchrun", "none"]
LAUNCHER_CHOICES: tuple[str, ...] = ("auto", "srun", "torchrun", "none")
DEFAULT_PORT = 29500
# Passed through to every rank (they inherit the environment) and recorded in the report.
COMM_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_DISTRIBUTED_", "UCX_", "FI_")
COMM_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")


def host_identity() -> dict[str, Any]:
    """This node's name and CPU architecture (`uname -m`: "x86_64", "aarch64"), and where verify runs on the host
    itself its OS and the Python running verify (host_os), as every report's host says them."""
    return {"hostname": hostname(), "cpu_arch": os.uname().machine, **host_os(python=True)}


def host_os(root: Path = Path("/"), *, python: bool = False) -> dict[str, Any]:
    """The host's OS as the knowledge base names OSes ("ubuntu22.04"; os_name), /etc/os-release's own ID and
    VERSION_ID, and with python the Python running this ("3.11"). Nothing inside a container: its OS and Python
    are its image's, not the host's, and `fleet compat` judges a stack installed on the host against the host's."""
    if pci_scope(root) == "container":
        return {}
    fields = read_os_release(root / "etc/os-release")
    said: dict[str, Any] = {"os": os_name(fields), "os_release": fields} if fields.get("id") else {}
    return said | ({"python": "{}.{}".format(*sys.version_info[:2])} if python else {})


def read_os_release(path: Path) -> dict[str, str]:
    """os-release's ID and VERSION_ID ({"id": "rocky", "version_id": "9.4"}); {} when it cannot be read."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    found = {key.lower(): fields.get(key, "").strip().strip("\"'") for key in ("ID", "VERSION_ID")}
    return {key: value for key, value in found.items() if value}


def os_name(fields: dict[str, str]) -> str | None:
    """An OS as the knowledge base names OSes (ID + VERSION_ID: "ubuntu22.04", "rockylinux9"), or None."""
    name, version = fields.get("id", ""), fields.get("version_id", "")
    if not name:
        return None
    if name in ("rocky", "rhel", "almalinux"):  # the knowledge base speaks of rockylinux8/9, by major
        return f"rockylinux{version.split('.')[0]}"
    return f"{name}{version}"


def hostname() -> str:
    """This node's name as socket.gethostname() gives it: both read uname's nodename, and verify's
    start-up (`--passive`, every run's header) need not import socket for it."""
    return os.uname().nodename


@dataclass(frozen=True)
class Explicit:
    """`--nnodes/--node-rank/--master-addr/--master-port/--node-name` as given (None: not given)."""

    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    node_name: str | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.nnodes, self.node_rank, self.master_addr, self.master_port))


@dataclass(frozen=True)
class Placement:
    launcher: Literal["srun", "torchrun", "explicit"]
    job: str  # the launcher's job or run id: keys in the rendezvous store are prefixed with it
    node: str  # this node's name, as reports and findings name it
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int
    rank: int | None = None  # launchers: the one rank this process is; explicit: None (one per device)
    world: int | None = None  # launchers: known; explicit: nnodes x the ranks each node starts
    local_rank: int | None = None
    agent_store: bool = False  # torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT

    @property
    def hosts_store(self) -> bool:
        """Whether this process hosts the rendezvous store (rank 0's, or node 0's)."""
        if self.launcher == "explicit":
            return self.node_rank == 0
        return self.rank == 0 and not self.agent_store

    @property
    def leads_job(self) -> bool:
        """Global rank 0's process: it writes the job summary."""
        return self.node_rank == 0 if self.launcher == "explicit" else self.rank == 0

    @property
    def leads_node(self) -> bool:
        """The process that writes this node's report (one per node)."""
        return self.launcher == "explicit" or self.local_rank == 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["master"] = f"{self.master_addr}:{self.master_port}"
        data["hosts_store"] = self.hosts_store
        return data


def detect(env: Mapping[str, str], explicit: Explicit, *, choice: LauncherChoice = "auto") -> Placement | None:
    """The placement of this process, or None for a run on this node alone.

    Explicit flags win; else the launcher named (or, with auto, the one found: torchrun before srun,
    since torchrun may itself run inside an srun step). A launcher with one rank is a node-local run."""
    if explicit.given():
        return _explicit(explicit)
    if choice == "none":
        return None
    found = choice if choice != "auto" else ("torchrun" if _is_torchrun(env) else "srun" if _is_srun(env) else None)
    if found is None:
        return None
    if found == "torchrun" and not _is_torchrun(env):
        raise BadRequest(
            "--launcher torchrun: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are not set",
            hint="start it with torchrun --nproc-per-node N -m gpuenv verify --check allreduce",
        )
    if found == "srun" and not _is_srun(env):
        raise BadRequest(
            "--launcher srun: SLURM_PROCID and SLURM_NTASKS are not set (not inside an srun step)",
            hint="srun --ntasks-per-node GPUS gpuenv verify --check allreduce",
        )
    placement = _torchrun(env, explicit) if found == "torchrun" else _srun(env, explicit)
    return placement if (placement.world or 0) > 1 else None


def _is_torchrun(env: Mapping[str, str]) -> bool:
    return all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _is_srun(env: Mapping[str, str]) -> bool:
    return bool(env.get("SLURM_PROCID") and (env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")))


def _number(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise BadRequest(f"{name} is not set", hint="start verify with the launcher, or give --nnodes etc.")
        return default
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"{name}={value!r} is not a number", hint="is the launcher's environment intact?") from None


def _within(
    env: Mapping[str, str], name: str, size_name: str, *, default: int | None = None, default_size: int | None = None
) -> tuple[int, int]:
    """(env[name], env[size_name]): a size of at least 1 and a rank from 0 below it, else a bad
    request naming the variable, before any rendezvous (a rank no peer expects waits out the timeout)."""
    size = _number(env, size_name, default_size)
    if size < 1:
        raise BadRequest(f"{size_name}={size} is not a number of processes", hint=_INTACT)
    value = _number(env, name, default)
    if not 0 <= value < size:
        raise BadRequest(f"{name}={value} is outside 0..{size - 1} ({size_name}={size})", hint=_INTACT)
    return value, size


_INTACT = "the launcher's variables disagree: start verify with the launcher itself, or check what set them"


def _torchrun(env: Mapping[str, str], explicit: Explicit) -> Placement:
    rank, world = _within(env, "RANK", "WORLD_SIZE")
    local_rank, local_world = _within(env, "LOCAL_RANK", "LOCAL_WORLD_SIZE", default=0, default_size=1)
    default_nodes = max(1, world // local_world)
    if env.get("GROUP_RANK"):
        node_rank, nnodes = _within(env, "GROUP_RANK", "GROUP_WORLD_SIZE", default_size=default_nodes)
    else:
        node_rank, nnodes = rank // local_world, _number(env, "GROUP_WORLD_SIZE", default_nodes)
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return Placement(
        launcher="torchrun",
        job=f"{env.get('TORCHELASTIC_RUN_ID', 'none')}.{restart}",
        node=explicit.node_name or hostname(),
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=env["MASTER_ADDR"],
        master_port=_port(env["MASTER_PORT"], "MASTER_PORT"),
        rank=rank,
        world=world,
        local_rank=local_rank,
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
    )


def _srun(env: Mapping[str, str], explicit: Explicit) -> Placement:
    tasks = "SLURM_STEP_NUM_TASKS" if env.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    rank, world = _within(env, "SLURM_PROCID", tasks, default_size=1)
    local_rank, _ = _within(env, "SLURM_LOCALID", tasks, default=0, default_size=1)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise BadRequest("SLURM_STEP_NODELIST is not set", hint="run verify as an srun step")
    nodes = expand_nodelist(nodelist)
    node = explicit.node_name or env.get("SLURMD_NODENAME") or hostname().split(".")[0]
    job_id = env.get("SLURM_JOB_ID", "0")
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "0"))
    port = explicit.master_port or (_port(env["MASTER_PORT"], "MASTER_PORT") if env.get("MASTER_PORT") else None)
    return Placement(
        launcher="srun",
        job=f"{job_id}.{step}",
        node=node,
        node_rank=nodes.index(node) if node in nodes else _number(env, "SLURM_NODEID", 0),
        nnodes=len(nodes),
        master_addr=env.get("MASTER_ADDR") or nodes[0],
        master_port=port or job_port(job_id, step),
        rank=rank,
        world=world,
        local_rank=local_rank,
    )


def job_port(job_id: str, step: str) -> int:
    """A rendezvous port every task of one Slurm step computes alike (10000-29999, below the
    ephemeral range), different for concurrent steps of a job; MASTER_PORT or --master-port beat it."""
    try:
        return 10000 + (int(job_id) * 97 + int(step)) % 20000
    except ValueError:
        return DEFAULT_PORT


def _explicit(explicit: Explicit) -> Placement:
    missing = [
        f"--{n}"
        for n, v in (
            ("nnodes", explicit.nnodes),
            ("node-rank", explicit.node_rank),
            ("master-addr", explicit.master_addr),
        )
        if v is None
    ]
    if missing:
        raise BadRequest(
            f"a run across nodes also needs {', '.join(missing)}",
            hint="give --nnodes N --node-rank R --master-addr HOST [--master-port P] together",
        )
    assert explicit.nnodes is not None and explicit.node_rank is not None and explicit.master_addr is not None
    if not 0 <= explicit.node_rank < explicit.nnodes:
        raise BadRequest(
            f"--node-rank {explicit.node_rank} is outside 0..{explicit.nnodes - 1}",
            hint="node ranks count from 0 to --nnodes minus 1",
        )
    return Placement(
        launcher="explicit",
        job=f"explicit-{explicit.master_addr}-{explicit.master_port or DEFAULT_PORT}",
        node=explicit.node_name or hostname(),
        node_rank=explicit.node_rank,
        nnodes=explicit.nnodes,
        master_addr=explicit.master_addr,
        master_port=explicit.master_port or DEFAULT_PORT,
    )


def _port(value: str, name: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise BadRequest(f"{name}={value!r} is not a TCP port", hint="a number from 1 to 65535")
    return port


def expand_nodelist(text: str) -> list[str]:
    """A Slurm node list (`gpu[001-004,010]`, `a[1-2]-b[3-4]`) as host names, by python-hostlist."""
    with needed("hostlist", "expanding SLURM_NODELIST"):
        import hostlist  # extra slurm: only a node list needs it
    try:
        names: list[str] = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise BadRequest(f"cannot read the Slurm node list {text!r}: {exc}", hint="is SLURM_NODELIST intact?") from None
    return names


def comm_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The communication settings the ranks run with (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG, ...)."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(COMM_ENV_PREFIXES) or k in COMM_ENV_NAMES}
