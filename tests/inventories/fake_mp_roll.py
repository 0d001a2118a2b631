# The whole deploy against pyinfra's @fake connector: a converged cluster whose gpu cache group
# runs in process while the inventory puts it in LMCache's MP mode on vLLM 0.34 (issue 51): the
# roll to MP (lmcache-server.service first, then the engines in their batches, cold). gpu1 also
# holds kvceph's two older venvs, an operator's digest-named directory and a stale wheel: the prune.
#   pyinfra --dry tests/inventories/fake_mp_roll.py deploy.py
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_facts  # noqa: E402

_GPU = ("@fake/gpu1", "@fake/gpu2")
_LAYOUT = fake_facts.Layout(
    "fake_mp_roll", converged=True, kvceph_connector=_GPU, mp=_GPU, old_venvs=("@fake/gpu1",)
)
_groups = fake_facts.groups(_LAYOUT)
globals().update(_groups)  # ceph_admin, rgw, gpu, gaudi
