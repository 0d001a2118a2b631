# A fresh cluster whose Ceph admin host also runs the operator's Prometheus (group monitoring):
#   pyinfra --dry tests/inventories/fake_monitoring.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_groups = fake_facts.groups(
    fake_facts.Layout("fake_monitoring", converged=False, monitoring=("@fake/ceph1",))
)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi, monitoring
