# The whole deploy against pyinfra's @fake connector: a converged cluster whose gpu cache group
# still runs vLLM 0.26.0 (written on the fleet's seed) while the profile says 0.33: another key
# scheme, so the group gets that scheme's own seed and rolls in its batches
# (deploys/engine/upgrade.py).
#   pyinfra --dry tests/inventories/fake_scheme.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_LAYOUT = fake_facts.Layout("fake_scheme", converged=True, old_scheme=("@fake/gpu1", "@fake/gpu2"))
_groups = fake_facts.groups(_LAYOUT)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
