"""Slurm's hooks: a HealthCheckProgram, a prolog and an epilog that drain with a `gpuenv:` reason.

`core` is pure (reasons, which drain is ours, slurm.conf lines), `scontrol` wraps Slurm's commands,
`service` runs verify under a hard time budget and decides what to do with the node.
"""
