"""The knowledge base's former name, kept importable for one release: import it from `gpuenv.kb`."""

from __future__ import annotations

import sys

from gpuenv import kb
from gpuenv.kb import *  # noqa: F403
from gpuenv.kb import load, model, rules

__all__ = kb.__all__

# `gpuenv.compat.model` and its siblings name the same modules as `gpuenv.kb.model`
for _name, _module in (("load", load), ("model", model), ("rules", rules)):
    sys.modules[f"{__name__}.{_name}"] = _module
