"""kvceph status: a read-only view of the fleet. Changes nothing on any host, takes no run lock.

    pyinfra inventories/<lab>.py status.py        (make status)

Per engine: unit state and since when, vLLM / LMCache versions, running vs desired digest
(drift, and which setting), /health, requests served, LMCache hit tokens vs queried tokens and
vLLM's own prefix-cache counters since the engine started (its /metrics), the GPU prefill
time the cache saved, and "S3 OFF" where LMCache's stock S3 connector turned S3 off in this
start (its journal; the next deploy restarts that engine once the endpoint answers). Per
cluster: bucket objects and bytes vs quota, the lifecycle rule, RGW daemons up, the S3 endpoint
(and, under cephadm, the RGW and ingress services), the last verify.py verdict and its age, the
last probe.py verdict per host.

A table on stdout; status-<run>.json (or --data kvceph_status_json=PATH) and a PNG of hit ratio
and saved GPU time per engine (kvceph_status_png) in kvceph_verify_report_dir. A host that
cannot be read is a row that says so; the run then ends with "kvceph status: partial: ..." and
a non-zero exit status. No operation is created: everything happens while pyinfra loads this
file (deploys/status/controller.py), with the deploy's own facts through its fact memo.
"""

from pyinfra import inventory, state

from deploys import preflight
from deploys.status import controller

checked = preflight.run(state, inventory, lock=False)
controller.run(state, inventory, checked)
