"""No operations: a pyinfra run on the inventory that connects every host and does nothing.

bench/run.py times it as the ``pyinfra`` case: what pyinfra itself costs per run (interpreter
and import, inventory, one SSH connection per host, the empty plan, disconnect and exit), so a
no-op's distance from the floor splits into pyinfra's part and kvceph's.
"""
