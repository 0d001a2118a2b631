"""What the engines' ``/metrics`` say, and what kvceph gives the operator's Prometheus and Grafana.

Pure package. The engines' figures: ``metrics`` parses Prometheus text, ``counters`` and
``tiers`` read an engine's cache counters and hits per tier, ``mp_server`` summarises
LMCache's MP server, ``savings`` the GPU time the cache saved, and ``figures`` holds the one
definition of "hit", "saved" and "pays"; facts, verify.py and status.py read them here. The
operator's files: settings and the inventory in, plain data out (``targets``, ``rules``,
``dashboard``); the stage that writes them is ``deploys/stages/monitoring.py``.
"""
