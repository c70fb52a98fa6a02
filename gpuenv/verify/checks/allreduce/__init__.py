"""allreduce (and allgather/reducescatter at standard): exact collectives and their bandwidth.

check.py plans the run and starts the ranks (`run`, which the worker calls); each rank runs
workload.py (the collectives of collectives.py, the pairs of pairs.py, one DDP step); judging.py
turns their results into findings and metrics (pure).
"""

from gpuenv.verify.checks.allreduce.check import run

__all__ = ["run"]
