# A fresh cluster with four RGW hosts (labels to add on each) whose inference hosts run an image
# that already carries the engine (kvceph_engine_install False): the longest Ceph-admin and the
# shortest inference operation chains. Scripted facts in fake_facts.py.
#   pyinfra --dry tests/inventories/fake_rgw_hosts.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_LAYOUT = fake_facts.Layout(
    "fake_rgw_hosts",
    converged=False,
    extra_rgw=("@fake/rgw2", "@fake/rgw3", "@fake/rgw4"),
    engine_preinstalled=True,
)
_groups = fake_facts.groups(_LAYOUT)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
