"""kvceph: the seed procedure as one idempotent pyinfra run.

    pyinfra inventories/<lab>.py deploy.py

Stages, in the order of the procedure (each a module in deploys/stages/):
  1. Ceph pools         pre-create RGW pools (pg counts, size/min_size, application)
  2. RGW service        cephadm spec (RGW behind haproxy), host labels
     S3 tier            rgw_dns_name, RGW user, bucket, lifecycle, quota
     Model mirror       (mirror source) models bucket, owner, read-only reader, uploads
  3. Engine software    pinned vLLM + LMCache in a venv (a replaced node arrives blank)
  4. Inference config   LMCache YAML, AWS credentials, /etc/hosts for virtual-host addressing
     Model weights      (mirror source) pull, check against the manifest, rename into place
  5. vLLM service       env + unit, rolling restart only where the config digest changed
  6. Readiness check    /health and a minimal completion (read-only)
     Monitoring         (hosts of group monitoring) Prometheus targets, rules, Grafana dashboard
     Router             (hosts of group router) the cache-aware router in front of the engines
The full cold -> warm -> cold proof is verify.py (it restarts engines and writes objects).
"""

from pyinfra import host, inventory, state

from deploys import preflight
from deploys.operations.run import barrier

checked = preflight.run(state, inventory)
me = checked.hosts[host.name]

if me.is_ceph_admin:
    from deploys.stages import ceph_pools, model_mirror, rgw_service, s3_tier

    rgw_service.check(me)  # a layout the orchestrator refuses stops before the pools change
    ceph_pools.apply(me)
    rgw_service.apply(me, checked)
    s3_tier.apply(me, checked)
    model_mirror.apply(me, checked)

# Engines must not start before their user, bucket and DNS name exist (LMCache turns S3 off
# for good after connection errors), so every host waits here for the Ceph stages.
barrier(name="Ceph and S3 tier ready", what="pools, RGW and S3 tier converged")

if me.is_inference:
    from deploys.stages import (
        engine_software,
        inference_config,
        model_weights,
        readiness,
        vllm_service,
    )

    engine_software.apply(me)
    inference_config.apply(me, checked)
    model_weights.apply(me, checked)
    vllm_service.apply(me, checked)
    readiness.apply(me)

if me.monitoring is not None:
    from deploys.stages import monitoring

    monitoring.apply(me, checked)

if me.router is not None:
    from deploys.stages import router

    router.apply(me, checked)
