"""Imported only by the rank forkserver, first in its preload list (see gpuenv.verify.ranks): the
forkserver dies with the verify worker that started it (processes.die_with_parent: a pidfd watch). Left to itself it
would exit only after the ranks do, and then spend seconds in torch's exit handlers.
Importing this module anywhere else would tie that process to its parent's life."""

from __future__ import annotations

import os

from gpuenv.processes import die_with_parent

die_with_parent(os.getppid())
