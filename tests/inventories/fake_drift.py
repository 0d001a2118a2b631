# The whole deploy against pyinfra's @fake connector: a converged cluster where two engines
# drifted out of band and were restarted by hand, so they still carry the desired digest:
# gaudi1's lmcache.yaml says chunk_size 512, gpu2's vllm.env PYTHONHASHSEED=68.
#   pyinfra --dry tests/inventories/fake_drift.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_LAYOUT = fake_facts.Layout(
    "fake_drift", converged=True, yaml_drift=("@fake/gaudi1",), env_drift=("@fake/gpu2",)
)
_groups = fake_facts.groups(_LAYOUT)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
