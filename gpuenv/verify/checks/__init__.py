"""The checks. Each module has `run(ctx) -> CheckResult`, run inside the verify worker, and pure
evaluation functions (facts in, findings out) that the tests exercise without torch or a GPU."""
