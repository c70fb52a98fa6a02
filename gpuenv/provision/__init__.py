"""Provisioning: a stack per host, the variables file, and the Ansible project that installs it.

The Ansible project itself is static (playbooks/); gpuenv renders only its variables file and its
inventory (gpuenv.ansible lays the project out and drives the run). gpuenv.provision.plan checks the
request and plans each host's stack; gpuenv.provision.apply writes the project and runs it
(through gpuenv.adapters.ansible); the command is gpuenv.cli.provision_cmd.
"""

from __future__ import annotations

VARS_FILE = "group_vars/all/gpuenv.yml"
WHEEL_DIR = "files"  # the project's files/ folder: copy tasks find gpuenv's wheel there
