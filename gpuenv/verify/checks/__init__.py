"""The checks. Each check, a module or a package re-exporting it, has `run(ctx) -> CheckResult`, run
inside the verify worker, and pure evaluation functions (facts in, findings out) that the tests
exercise without torch or a GPU. common.py holds what the torch checks share."""
