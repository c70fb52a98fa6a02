"""A site's own checks in gpuenv verify: Python entry points (group `gpuenv.checks`, the public API
in gpuenv.sitecheck) and executables in a checks directory, each an ordinary check of the run.

spec.py is what a site check declares; load.py gathers the ones a run enables, from plugins.py
(entry points) and programs.py (a checks directory, trusted as root trusts a file); answers.py turns
what a check answers into a CheckResult (pure), judging.py holds its figures against baselines;
running.py runs a program under the watchdog, helper.py is the process it runs in. No directory is
read and no entry point imported unless a run enables them; `--help` and `--passive` import none
of this package.
"""
