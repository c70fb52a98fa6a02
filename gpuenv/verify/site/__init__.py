"""A site's own checks in gpuenv verify: Python entry points (group `gpuenv.checks`, the public API
in gpuenv.sitecheck) and executables in a checks directory, each an ordinary check of the run.

spec.py is what a site check declares; plugins.py finds and loads entry points; programs.py reads
and trusts a checks directory; answers.py turns what a check answers into a CheckResult (pure);
running.py runs a program under the watchdog, helper.py is the process it runs in. Nothing here is
imported unless a run enables site checks.
"""
