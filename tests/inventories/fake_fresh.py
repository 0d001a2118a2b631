# The whole deploy against pyinfra's @fake connector: a fresh cluster (scripted facts in
# fake_facts.py). Run from the repo root, like operators do:
#   pyinfra --dry tests/inventories/fake_fresh.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

fake_facts.export_fake_credentials()
_groups = fake_facts.inventory(fake_facts.Layout("fake_fresh", converged=False))
ceph_admin = _groups["ceph_admin"]
rgw = _groups["rgw"]
gpu = _groups["gpu"]
gaudi = _groups["gaudi"]
