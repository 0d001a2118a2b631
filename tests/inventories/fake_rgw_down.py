# A cluster whose RGW is stopped (haproxy still answers, with 503): the S3 tier must stop with
# one line naming the endpoint. Converged, or fresh with KVCEPH_FAKE_FRESH=1. See fake_facts.py.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

fake_facts.export_fake_credentials()
_converged = os.environ.get("KVCEPH_FAKE_FRESH") != "1"
_groups = fake_facts.inventory(
    fake_facts.Layout("fake_rgw_down", converged=_converged, rgw_down=True)
)
ceph_admin = _groups["ceph_admin"]
rgw = _groups["rgw"]
gpu = _groups["gpu"]
gaudi = _groups["gaudi"]
