"""Provisioning, pure half: inventories, the variables file, and what ansible-runner is asked to do.

The Ansible project itself is static (playbooks/); gpuenv renders only its variables file and its
inventory. The service gpuenv.provision.project writes and runs it (through gpuenv.adapters.ansible);
the command is gpuenv.cli.provision_cmd.
"""

from __future__ import annotations

VARS_FILE = "group_vars/all/gpuenv.yml"
INVENTORY_FILE = "inventory/hosts.yml"
WHEEL_DIR = "files"  # the project's files/ folder: copy tasks find gpuenv's wheel there
