"""The resolver, a package of small pure steps (the service itself is gpuenv.resolve.service.resolve):

- `request`: what is asked (the Request) and the rules every platform shares about it: which releases
  a --torch names, which Python an OS gives a release, the numpy a release was built against;
- `candidates`: every (torch release, build, Python) the constraints allow, the rest refused with the
  reason, and the `Resolution` a platform answers through;
- `ranking`: how usable candidates rank, and why one lost;
- `reasons`: the alternatives passed over, and what ruled everything out when nothing fits;
- `service`: `resolve(kb, request)`: the platform chosen once (gpuenv.platforms.registry), its resolve
  half called for the rest.

The platforms' resolve halves sit between `request`…`reasons` and `service`, so this package's own
import runs nothing of them.
"""

from __future__ import annotations

from gpuenv.resolve.request import DEFAULT_OS, MIN_PYTHON, PYTHON_SOURCE_RANK, Purpose, Request, torch_matches

__all__ = ["DEFAULT_OS", "MIN_PYTHON", "PYTHON_SOURCE_RANK", "Purpose", "Request", "torch_matches"]
