# The whole deploy against pyinfra's @fake connector: a fresh cluster (scripted facts in
# fake_facts.py). Run from the repo root, like operators do:
#   pyinfra --dry tests/inventories/fake_fresh.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_groups = fake_facts.groups(fake_facts.Layout("fake_fresh", converged=False))
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
