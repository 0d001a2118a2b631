"""Stage 6: read-only readiness check: /health and a minimal completion on every engine (with
the API key when one is set), and LMCache's remote tier present (deploys/tier/remote_tier.py).

It proves the API path before any cache test, so network faults are not mistaken for cache
faults. It reports no change; a host that is not ready fails with the reason.
"""

from __future__ import annotations

from pyinfra.api import deploy

from deploys import paths
from deploys.operations import connector as connector_ops
from deploys.operations import service
from deploys.settings import HostSettings


@deploy("Readiness check")
def apply(me: HostSettings) -> None:
    e = me.engine
    for engine in e.engines:
        service.ready(
            name=f"Engine answers on port {engine.port}",
            python=f"{e.venv}/bin/python",
            port=engine.port,
            model=e.model,
            timeout=60,
            secrets=paths.SECRETS_PATH,
            bind=me.security.vllm_bind,
        )
        # LMCache only logs a remote backend it could not create; vLLM then serves without it.
        connector_ops.remote_tier_present(
            name=f"Engine on port {engine.port} has its remote (S3) tier",
            unit=engine.unit,
            connector=me.lmcache.tier.connector,
        )
