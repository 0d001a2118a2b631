"""The seed procedure's stages, one module each with one ``@deploy``, in procedure order.

Ceph admin host: ``ceph_pools`` (1), ``rgw_service`` (2), ``s3_tier`` (2b), ``model_mirror``
(mirror source only). Inference hosts: ``engine_software`` (3), ``inference_config`` (4),
``model_weights`` (mirror source only), ``vllm_service`` (5), ``readiness`` (6, read-only).
deploy.py calls them in this order; ``rotation`` is rotate.py's two phases, never deploy.py's.
"""
