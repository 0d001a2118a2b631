# The whole deploy against pyinfra's @fake connector, kvceph's LMCache connector on the NVIDIA
# hosts (gaudi1 keeps the stock one: one cache group may mix them): a fresh cluster.
#   pyinfra --dry tests/inventories/fake_connector_fresh.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_LAYOUT = fake_facts.Layout(
    "fake_connector_fresh", converged=False, kvceph_connector=("@fake/gpu1", "@fake/gpu2")
)
_groups = fake_facts.groups(_LAYOUT)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
