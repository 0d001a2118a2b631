"""kvceph S3 key rotation without an outage (docs/security.md, "S3 key rotation").

    pyinfra -y inventories/<lab>.py rotate.py --data kvceph_rotation=add
    pyinfra -y inventories/<lab>.py deploy.py
    pyinfra -y inventories/<lab>.py rotate.py --data kvceph_rotation=retire \\
        --data kvceph_retire_access_key=<old access key>

Every step runs with the NEW keys configured (KVCEPH_S3_ACCESS_KEY/KVCEPH_S3_SECRET_KEY in the
environment or the secrets file). ``add`` gives the RGW user the new key beside the old one;
``deploy.py`` rewrites the engines' credentials and restarts them one host at a time;
``retire`` removes the old key, and refuses, naming the hosts, while any engine still runs
with the old one. Each phase is idempotent; ``--dry`` plans exactly what it does.
"""

from pyinfra import host, inventory, state

from deploys import preflight
from deploys.stages import rotation

rotation.phase(host.data)  # before any host is contacted
checked = preflight.run(state, inventory)
me = checked.hosts[host.name]
phase, old_access_key = rotation.options(host.data, checked.credentials)

if me.is_ceph_admin:
    if phase == "add":
        rotation.add(me, checked)
    else:
        rotation.retire(me, checked, inventory, old_access_key)
