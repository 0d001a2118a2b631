# A cluster whose mons do not answer: every `ceph` call times out. The Ceph pools stage must
# stop with one line. See fake_facts.py.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_groups = fake_facts.groups(fake_facts.Layout("fake_mon_down", converged=True, mon_down=True))
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
