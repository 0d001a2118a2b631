"""kvceph cache probe: will the S3 tier pay? Measured from every inference host.

    pyinfra -y inventories/<lab>.py probe.py        (make probe)

From each inference host in turn, PUT then GET objects of the size LMCache writes for the
host's configuration (chunk_size x KV bytes per token per worker, deploys/tier/kv_sizing.py), with
awscrt's S3 client built as LMCache 0.5.6 builds it, through the endpoint in the host's
lmcache.yaml and with the service user's keys. Then per host: GB/s up and down, the break-even
bandwidth for 8k / 32k / 128k-token prompts at the engine's prefill rate (the last verify.py
run's, else kvceph_prefill_tokens_per_s), and a verdict: pays / marginal / slower than
recompute (deploys/probe/verdicts.py). Table on stdout; probe-<run>.json and probe-latest.json
in kvceph_verify_report_dir. The deploy prints a host's last verdict when it restarts its engine.

Read-only apart from its own objects (kvceph-probe-<nonce>@...), which it deletes again. Needs
a converged deploy (engine venv with awscrt, ~/.aws of the service user, lmcache.yaml).
"""

from pyinfra import inventory, state

from deploys import preflight
from deploys.operations.run import on_the_controller
from deploys.probe.controller import run_probe

checked = preflight.run(state, inventory)
on_the_controller(
    checked, "kvceph: cache probe (S3 bandwidth vs break-even, every inference host)", run_probe
)
