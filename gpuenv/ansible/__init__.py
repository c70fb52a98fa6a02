"""Driving Ansible: the one room that knows how gpuenv lays out, asks for and reads an Ansible run.

- `project`: the shipped playbooks laid out in a folder, with gpuenv's rendered files beside them;
- `hosts`: the `Hosts` a command targets (names or an inventory, SSH and become settings), turned
  into a validated `Inventory` and the become password;
- `inventory`: inventories as values, pure: validation, Ansible's `--list` output read, rendering;
- `loader`: a user's inventory loaded, the one impure step (reads files, runs ansible-inventory
  through gpuenv.adapters.ansible);
- `runner`: the keyword arguments of `ansible_runner.run` (pure);
- `events`: what ansible-runner's events say, per host (pure).

gpuenv.provision and gpuenv.fleet drive Ansible through this room; gpuenv.adapters.ansible is the
thin side-effect edge that runs ansible-runner and ansible-inventory, below it.
"""
