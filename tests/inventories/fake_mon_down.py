# A cluster whose mons do not answer: every `ceph` call times out. The Ceph pools stage must
# stop with one line. See fake_facts.py.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

fake_facts.export_fake_credentials()
_groups = fake_facts.inventory(fake_facts.Layout("fake_mon_down", converged=True, mon_down=True))
ceph_admin = _groups["ceph_admin"]
rgw = _groups["rgw"]
gpu = _groups["gpu"]
gaudi = _groups["gaudi"]
