"""nvml: GPU health as NVML reports it, judged by a policy file users can override.

snapshot.py reads NVML in the worker (`run`, which the worker calls), under_load.py keeps the GPUs
busy while links and clocks are re-read, rules.py judges a snapshot (pure: facts in, findings out)
and policy.py loads the policy every nvml finding takes its severity and action from.
"""

from gpuenv.verify.checks.nvml.snapshot import run

__all__ = ["run"]
