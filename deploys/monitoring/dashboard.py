"""The Grafana dashboard (JSON model, schemaVersion 39) over the rules' recorded figures.

Panels read the recording rules (``rules.py``) where a figure is kvceph's (hit ratio per tier,
saved GPU time, KV bytes loaded, LMCache's tokens per tier and S3 bytes), vLLM's TTFT
histogram, the Ceph mgr exporter's pool figures, status.py's bucket figures
(``status_metrics``) and LMCache MP servers' own hit counters (job ``kvceph-mp-server``).
vLLM does not label a request cold or warm, so the TTFT panel shows every request's p50/p99
beside the cold estimate (the prefill curve at the mean prompt): warm requests are the ones
under it. The datasource is a variable, so the file imports into any Grafana.
"""

from __future__ import annotations

from deploys.monitoring import status_metrics

UID = "kvceph-tier"
DS = {"type": "prometheus", "uid": "${datasource}"}


def _panel(pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int):
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _ttft(q: float) -> str:
    return (
        f"histogram_quantile({q}, sum by (le, cache_group) "
        "(rate(vllm:time_to_first_token_seconds_bucket[5m])))"
    )


def _mp_hits(tier: str) -> str:
    """Tokens/s an MP server's lookups found in one tier (``l1`` or ``l2``), per model and salt
    (LMCache 0.5.6's counters; ``l1 + l2`` = every hit)."""
    return (
        f"sum by (model_name, cache_salt) (rate(lmcache_mp_lookup_hit_{tier}_tokens_total"
        '{job="kvceph-mp-server"}[5m]))'
    )


def dashboard(data_pool: str) -> dict:
    """The dashboard; + data_pool: the RGW data pool (bucket usage is its usage)."""
    mean = "kvceph:mean_prompt_tokens:rate1h"
    cold = f"kvceph:prefill_curve_a * {mean} + kvceph:prefill_curve_b * {mean} ^ 2"
    pool = f'ceph_pool_metadata{{name="{data_pool}"}}'
    panels = [
        _panel(
            1,
            "Hit ratio per tier",
            "percentunit",
            [("kvceph:hit_ratio:rate15m", "{{cache_group}} {{tier}}")],
            0,
            0,
        ),
        _panel(
            2,
            "TTFT p50 / p99 (all requests) vs cold estimate",
            "s",
            [
                (_ttft(0.5), "{{cache_group}} p50"),
                (_ttft(0.99), "{{cache_group}} p99"),
                (cold, "{{cache_group}} cold (prefill curve at the mean prompt)"),
            ],
            12,
            0,
        ),
        _panel(
            3,
            "KV loaded from LMCache (DRAM and S3, every TP worker)",
            "Bps",
            [("kvceph:kv_bytes_loaded:rate5m", "{{cache_group}}")],
            0,
            8,
        ),
        _panel(
            4,
            "GPU prefill hours saved per day",
            "h",
            [("kvceph:gpu_prefill_seconds_saved:per_hour * 24 / 3600", "{{cache_group}}")],
            12,
            8,
        ),
        _panel(
            5,
            f"RGW data pool {data_pool}: stored vs available",
            "bytes",
            [
                (f"ceph_pool_stored * on (pool_id) group_left (name) {pool}", "stored"),
                (f"ceph_pool_max_avail * on (pool_id) group_left (name) {pool}", "available"),
            ],
            0,
            16,
        ),
        _panel(
            7,
            "Bucket usage vs quota (status.py, docs/monitoring.md)",
            "bytes",
            [
                (status_metrics.USED, "{{bucket}} used"),
                (status_metrics.QUOTA, "{{bucket}} quota"),
            ],
            0,
            24,
        ),
        _panel(
            8,
            "LMCache tokens hit per tier (LMCache's counters)",
            "short",
            [("kvceph:lmcache_tier_tokens:rate5m", "{{cache_group}} {{tier}}")],
            12,
            24,
        ),
        _panel(
            9,
            "S3 traffic of LMCache's remote connector",
            "Bps",
            [
                ("kvceph:s3_read_bytes:rate5m", "{{cache_group}} read"),
                ("kvceph:s3_write_bytes:rate5m", "{{cache_group}} written"),
            ],
            0,
            32,
        ),
        _panel(
            10,
            "LMCache MP server: lookup hit tokens per tier (L1 DRAM, L2 S3)",
            "short",
            [
                (_mp_hits("l1"), "{{model_name}} {{cache_salt}} L1"),
                (_mp_hits("l2"), "{{model_name}} {{cache_salt}} L2"),
            ],
            12,
            32,
        ),
        _panel(
            6,
            "Engines answering /metrics",
            "short",
            [('up{job="kvceph-engines"}', "{{host}} {{engine}}")],
            12,
            16,
        ),
    ]
    return {
        "uid": UID,
        "title": "kvceph: KV cache tier",
        "tags": ["kvceph", "vllm", "lmcache", "ceph"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }
