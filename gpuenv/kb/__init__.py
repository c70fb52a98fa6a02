"""`gpuenv kb refresh`: a proposed knowledge base from the upstream indexes or a recorded snapshot.

sources: where the bytes come from (HTTP with timeouts and retries, a recorded snapshot, or both while
recording); derive: the pure rules that turn upstream data into rows; refresh: the service that merges
the rows with the hand-kept overlay and the current file, diffs and writes the result.
"""
