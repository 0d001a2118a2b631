# A cluster whose RGW is stopped (haproxy still answers, with 503): the S3 tier must stop with
# one line naming the endpoint. Converged, or fresh with KVCEPH_FAKE_FRESH=1. See fake_facts.py.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_converged = os.environ.get("KVCEPH_FAKE_FRESH") != "1"
_groups = fake_facts.groups(fake_facts.Layout("fake_rgw_down", converged=_converged, rgw_down=True))
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
