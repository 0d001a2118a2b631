"""Prometheus recording and alert rules for the tier, as data (dumped to YAML by the stage).

Recording rules carry figures' definitions per cache group (``promql.py``); the prefill curve
of each group (``deploys/monitoring/savings.prefill_curve``, the one status.py reads) and its KV
bytes per token enter as constants. Every alert has a ``promtool test rules`` case
(tests/unit/test_monitoring.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from deploys.monitoring import figures, promql, status_metrics
from deploys.monitoring.promql import ENGINE, GROUP

ENGINES_JOB = "kvceph-engines"
CEPH_JOB = "kvceph-ceph-mgr"
ROUTER_JOB = "kvceph-router"
HAPROXY_JOB = "kvceph-haproxy"
MP_JOB = "kvceph-mp-server"
# Engines take 75-252 s to load (issue 52, measured first starts): a drained restart of a
# deploy's roll is down that long and must not page (kvceph_alert_engine_down_for).
ENGINE_DOWN_FOR = "5m"
# Every mgr answers /metrics; only the active one carries the cluster's figures (a standby
# answers an empty 200), so "no Ceph metrics" is this series missing, not a target down.
CEPH_HEALTH = "ceph_health_status"
# A collapse is judged against the mean of these hours, ending this long ago (the collapse
# itself must not pull its own baseline down).
BASELINE = "6h"
BASELINE_END = "30m"
COLLAPSE_FACTOR = 0.5  # below half its recent level
COLLAPSE_MIN_LEVEL = 0.1  # a group that hardly hit cannot collapse
QUOTA_LEVELS = {"warning": 0.80, "critical": 0.95}
# A deploy's roll restarts an engine once, verify.py twice (warm, fallback): a deploy and two
# verify runs in an hour are 5 starts, so a loop is 6 or more. A loop that never reaches
# /metrics has no start time to count: its target's up flips instead (2 changes a restart).
RESTARTS_PER_HOUR = 6
# S3 down with the DRAM tier on: hits go on, from DRAM; what stops is LMCache's remote writes
# (counted only once a PUT succeeded: InstrumentedRemoteConnector) while it still stores.
STORED = promql.LMCACHE_STORED
REMOTE_WRITES = promql.LMCACHE_REMOTE_WRITES


@dataclass(frozen=True)
class GroupFigures:
    """One cache group's constants: its name (the targets' ``cache_group`` label), the
    prefill curve ``a n + b n^2`` (seconds) and the KV bytes per token of the whole model
    (every TP worker's share together: what a loaded token moves), when known."""

    name: str
    a: float
    b: float
    kv_bytes_per_token: int | None = None


def _const(record: str, value: float, group: str) -> dict:
    return {"record": record, "expr": f"vector({value!r})", "labels": {"cache_group": group}}


def recording_rules(groups: Iterable[GroupFigures]) -> dict:
    """The ``kvceph-figures`` group: hit ratio per tier, reuse, saved GPU time, pays."""
    rules: list[dict] = []
    for g in groups:
        rules += [
            _const("kvceph:prefill_curve_a", g.a, g.name),
            _const("kvceph:prefill_curve_b", g.b, g.name),
        ]
        if g.kv_bytes_per_token:
            rules.append(_const("kvceph:kv_bytes_per_token", g.kv_bytes_per_token, g.name))
    rules += [
        {
            "record": "kvceph:hit_ratio:rate15m",
            "expr": promql.hit_ratio("15m", GROUP),
            "labels": {"tier": "lmcache"},
        },
        {
            "record": "kvceph:hit_ratio:rate15m",
            "expr": promql.gpu_hit_ratio("15m", GROUP),
            "labels": {"tier": "gpu"},
        },
        {"record": "kvceph:hit_ratio:rate5m", "expr": promql.hit_ratio("5m", GROUP)},
        {"record": "kvceph:mean_prompt_tokens:rate1h", "expr": promql.mean_prompt("1h", GROUP)},
        # figures.saved_seconds per token: prefill(n) / n = a + b n at the mean prompt
        {
            "record": "kvceph:prefill_seconds_per_token:rate1h",
            "expr": "kvceph:prefill_curve_a + kvceph:prefill_curve_b"
            " * kvceph:mean_prompt_tokens:rate1h",
        },
        {"record": "kvceph:reused_tokens:rate5m", "expr": promql.reused("5m", GROUP)},
        {"record": "kvceph:reused_tokens:rate1h", "expr": promql.reused("1h", GROUP)},
        {
            "record": "kvceph:gpu_prefill_seconds_saved:per_hour",
            "expr": "kvceph:reused_tokens:rate1h * kvceph:prefill_seconds_per_token:rate1h * 3600",
        },
        {
            "record": "kvceph:kv_bytes_loaded:rate5m",
            "expr": f"{promql.rate(promql.LOADED, '5m', GROUP)} * kvceph:kv_bytes_per_token",
        },
        # LMCache's per-tier counters: its hit tokens (any tier; each TP worker counts the same
        # tokens, so one worker's), the bytes its remote connector moved (every worker's).
        {"record": "kvceph:lmcache_hit_tokens:rate5m", "expr": promql.lmcache_hit_tokens("5m")},
        {
            "record": "kvceph:s3_read_bytes:rate5m",
            "expr": promql.rate(promql.REMOTE_READ_BYTES, "5m", GROUP),
        },
        {
            "record": "kvceph:s3_write_bytes:rate5m",
            "expr": promql.rate(promql.REMOTE_WRITE_BYTES, "5m", GROUP),
        },
        {
            "record": "kvceph:lmcache_tier_tokens:rate5m",
            "expr": "kvceph:s3_read_bytes:rate5m / on (cache_group) kvceph:kv_bytes_per_token",
            "labels": {"tier": "s3"},
        },
        {
            "record": "kvceph:lmcache_tier_tokens:rate5m",
            "expr": "clamp_min(kvceph:lmcache_hit_tokens:rate5m - on (cache_group)"
            " (kvceph:s3_read_bytes:rate5m / on (cache_group) kvceph:kv_bytes_per_token), 0)",
            "labels": {"tier": "dram"},
        },
        # figures.ttft_vs_cold: TTFT spent over (computed + reused) x seconds per token
        {
            "record": "kvceph:ttft_vs_cold:rate30m",
            "expr": f"{promql.rate(promql.TTFT + '_sum', '30m', GROUP)} / (("
            f"{promql.rate(promql.COMPUTED, '30m', GROUP)} + {promql.reused('30m', GROUP)})"
            " * kvceph:prefill_seconds_per_token:rate1h)",
        },
        {
            "record": "kvceph:reused_share:rate30m",
            "expr": f"{promql.reused('30m', GROUP)} / ({promql.reused('30m', GROUP)}"
            f" + {promql.rate(promql.COMPUTED, '30m', GROUP)})",
        },
    ]
    return {"name": "kvceph-figures", "rules": rules}


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, fix: str) -> dict:
    rule = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "service": "kvceph"}
    rule["annotations"] = {"summary": summary, "fix": fix}
    return rule


def alert_rules(rgw: tuple[str, int] | None, engine_down_for: str = ENGINE_DOWN_FOR) -> dict:
    """The ``kvceph-alerts`` group.

    + rgw: (cephadm's RGW service id, the daemons it should run); None: no RGW count alert
      (RGW run outside cephadm: kvceph does not know its daemons)
    + engine_down_for: how long a target is down before "engine down" fires (longer than an
      engine's load, so a drained restart does not page; a loop pages as KvcephEngineRestarting)
    """
    collapse_base = f"avg_over_time(kvceph:hit_ratio:rate15m[{BASELINE}] offset {BASELINE_END})"
    rules = [
        _alert(
            "KvcephEngineDown",
            f'up{{job="{ENGINES_JOB}"}} == 0',
            engine_down_for,
            "critical",
            "engine {{ $labels.engine }} on {{ $labels.host }} does not answer /metrics",
            "systemctl status / journalctl -u the engine's unit on the host (Restart=always: "
            "a unit that stays down fails its load, hit systemd's start limit or was stopped)",
        ),
        _alert(
            "KvcephEngineRestarting",
            f"max by ({ENGINE}) (changes({promql.STARTED}[1h])) >= {RESTARTS_PER_HOUR}"
            f' or max by ({ENGINE}) (changes(up{{job="{ENGINES_JOB}"}}[1h]))'
            f" >= {2 * RESTARTS_PER_HOUR}",
            "0m",
            "critical",
            "engine {{ $labels.engine }} on {{ $labels.host }} restarted "
            f"{RESTARTS_PER_HOUR} times or more in an hour (a crash loop)",
            "journalctl -u the engine's unit: it dies and systemd restarts it",
        ),
        _alert(
            "KvcephS3Down",
            f"{promql.rate(STORED, '10m', ENGINE)} > 0"
            f" unless on (instance) {promql.rate(REMOTE_WRITES, '10m', ENGINE)} > 0",
            "10m",
            "critical",
            "engine {{ $labels.engine }} on {{ $labels.host }} stores KV but none reaches S3: "
            "the remote tier is down (DRAM hits hide it from the hit alerts)",
            "the engine's journal (LMCache's S3 errors), probe.py for the S3 path, "
            "ceph orch ps --daemon_type rgw",
        ),
        _alert(
            "KvcephRemoteTierFailing",
            f"{promql.rate(promql.LOADED, '10m', ENGINE)} / "
            f"{promql.rate(promql.HITS, '10m', ENGINE)} < 0.5",
            "10m",
            "warning",
            "engine {{ $labels.engine }} on {{ $labels.host }} loads under half of "
            "the tokens LMCache claims: the loads fail and vLLM recomputes",
            "the engine's journal (LMCache's S3 errors), probe.py for the S3 path",
        ),
        _alert(
            "KvcephRemoteTierOff",
            f"{promql.rate(promql.QUERIES, '15m', ENGINE)} > 0"
            f" and {promql.rate(promql.HITS, '15m', ENGINE)} == 0"
            ' and on (cache_group) kvceph:hit_ratio:rate15m{tier="lmcache"} > 0.05',
            "15m",
            "critical",
            "engine {{ $labels.engine }} on {{ $labels.host }} hits nothing while "
            "its cache group hits: its remote tier is off (LMCache turns S3 off after errors)",
            "restart the engine once S3 answers (deploy.py's readiness check names LMCache's "
            "line); probe.py for the S3 path",
        ),
        _alert(
            "KvcephHitRatioCollapsed",
            f"kvceph:hit_ratio:rate15m < {COLLAPSE_FACTOR} * {collapse_base}"
            f" and {collapse_base} > {COLLAPSE_MIN_LEVEL}",
            "30m",
            "warning",
            "{{ $labels.tier }} hit ratio of {{ $labels.cache_group }} fell under half its "
            "level of the hours before",
            "status.py's cache_group_splits (a cache-key drift after a node replacement), "
            "the bucket's lifecycle, the engines' remote tier",
        ),
        _alert(
            "KvcephTierNotPaying",
            f"kvceph:ttft_vs_cold:rate30m > {figures.PAYS_MARGIN}"
            f" and on (cache_group) kvceph:reused_share:rate30m > {figures.PAYS_MIN_REUSED_SHARE}",
            "30m",
            "warning",
            f"{{{{ $labels.cache_group }}}}: TTFT above {figures.PAYS_MARGIN}x what its "
            "prompts cost cold: loading KV costs more than the prefill it replaces",
            "probe.py (S3 GET rate against the crossover); kvceph_min_hit_tokens (kvceph's "
            "connector)",
        ),
        _alert(
            "KvcephCephExporterDown",
            f'up{{job="{CEPH_JOB}"}} == 0',
            "5m",
            "warning",
            "the Ceph mgr's exporter {{ $labels.instance }} does not answer: RGW and pool "
            "alerts are blind",
            "ceph mgr module enable prometheus; ceph mgr services",
        ),
        _alert(
            "KvcephCephMetricsMissing",
            f'absent({CEPH_HEALTH}{{job="{CEPH_JOB}"}})',
            "5m",
            "critical",
            "no Ceph mgr exporter reports the cluster (no target, or only standby mgrs): "
            "every Ceph and RGW alert is blind",
            "ceph mgr services (the active mgr's URL); list every mgr host in "
            "kvceph_ceph_mgr_exporters",
        ),
        _alert(
            "KvcephHaproxyBackendDown",
            f'up{{job="{HAPROXY_JOB}"}} == 0 or haproxy_backend_active_servers'
            f'{{job="{HAPROXY_JOB}"}} == 0',
            "2m",
            "critical",
            "haproxy {{ $labels.instance }} does not answer, or its backend "
            "{{ $labels.proxy }} has no server up",
            "systemctl status haproxy; echo 'show servers state' | socat stdio "
            "/run/haproxy/admin.sock",
        ),
    ]
    used, quota = status_metrics.USED, status_metrics.QUOTA
    for severity, level in QUOTA_LEVELS.items():
        name = "KvcephBucketQuotaHigh" if severity == "warning" else "KvcephBucketQuotaFull"
        rules.append(
            _alert(
                name,
                f"{used} / ({quota} > 0) > {level}",
                "0m",
                severity,
                f"bucket {{{{ $labels.bucket }}}} is above {level:.0%} of its quota (as "
                "status.py last read it)",
                "the lifecycle expiry (kvceph_s3_expiration_days) or the quota "
                "(kvceph_s3_quota_max_size_gb); LMCache's writes fail once it is full",
            )
        )
    rules.append(
        _alert(
            "KvcephStatusStale",
            # absent_over_time: the timer was never installed (no series to age); for: the
            # first textfile scrape of a new Prometheus
            f"time() - {status_metrics.READ_AT} > 3 * 3600"
            f" or absent_over_time({status_metrics.READ_AT}[3h])",
            "10m",
            "warning",
            "status.py's bucket figures ({{ $labels.bucket }}) are 3 hours old or missing: the "
            "quota alerts are blind",
            "the timer that runs status.py with --data kvceph_status_metrics=...",
        )
    )
    if rgw:
        service_id, daemons = rgw
        # cephadm names its daemons rgw.<service_id>.<host>.<suffix>; other RGWs are not ours
        ours = f'ceph_rgw_metadata{{ceph_daemon=~"rgw\\\\.{re.escape(service_id)}\\\\..+"}}'
        # or vector(0): every daemon gone leaves no series to count; the cluster's health
        # series says the exporter is the active mgr's (else KvcephCephMetricsMissing fires)
        rules.append(
            _alert(
                "KvcephRgwDaemonDown",
                f"(count({ours}) or vector(0)) < {daemons}"
                f' and on () count({CEPH_HEALTH}{{job="{CEPH_JOB}"}}) > 0',
                "2m",
                "critical",
                f"fewer than {daemons} daemons of RGW service rgw.{service_id} report to the "
                "cluster",
                f"ceph orch ps --service_name rgw.{service_id}",
            )
        )
    return {"name": "kvceph-alerts", "rules": rules}


# A cache group's share is trimmed from 90 % down to 80 % every few minutes
# (deploys/cluster/cache_trim.py): above 95 % the trim is not keeping up (or not running), and RGW's
# quota refuses the group's writes at 100 %.
GROUP_NEARLY_FULL = 0.95
TRIM_STALE_S = 30 * 60  # six trim intervals


def cache_alerts() -> dict:
    """The ``kvceph-cache-alerts`` group: a cache group nearing its share, a trim that stopped
    (its own group and function: the other alerts are ``alert_rules``')."""
    used, share = status_metrics.GROUP_USED, status_metrics.GROUP_SHARE
    return {
        "name": "kvceph-cache-alerts",
        "rules": [
            _alert(
                "KvcephCacheGroupNearlyFull",
                f"{used} / ({share} > 0) > {GROUP_NEARLY_FULL}",
                "0m",
                "warning",
                f"cache group {{{{ $labels.prefix }}}} is above {GROUP_NEARLY_FULL:.0%} of its "
                "share of the quota: the trim does not keep up, and RGW refuses its writes at "
                "100 %",
                "systemctl status kvceph-cache-trim.service on the Ceph admin host; raise "
                "kvceph_s3_quota_max_size_gb if the fleet outwrites one trim (the plan says)",
            ),
            _alert(
                "KvcephCacheTrimStale",
                f"time() - {status_metrics.TRIM_AT} > {TRIM_STALE_S}",
                "0m",
                "warning",
                "the trim timer has not listed cache group {{ $labels.prefix }} for 30 min: "
                "once its share is full the cache stores nothing new",
                "systemctl list-timers kvceph-cache-trim.timer; journalctl -u "
                "kvceph-cache-trim.service on the Ceph admin host",
            ),
        ],
    }


# LMCache 0.5.6's MP server exports (tests/fixtures/mp_server/metrics-h100-served.txt) no
# registered-worker count and no health gauge (/status has both; status.py reads it). A worker
# that registered its KV cache is what the server's GPU->CPU copies run on, so lookups that
# miss (chunk-aligned tokens the server has not got) with no store submitted = no worker.
MP_REQUESTED = "lmcache_mp_lookup_requested_tokens_total"
MP_HIT = "lmcache_mp_lookup_hit_tokens_total"
MP_STORES = "lmcache_mp_num_submitted_stores_total"
MP_L2_ADAPTERS = "lmcache_mp_l2_store_adapters"


def mp_server_alerts() -> dict:
    """The ``kvceph-mp-server-alerts`` group (inventories with MP hosts): LMCache's MP server
    not answering through the gate, its L2 adapter off, no worker storing while lookups miss."""
    mp = f'job="{MP_JOB}"'

    def by_host(name: str) -> str:
        return f"sum by (host) (rate({name}{{{mp}}}[15m]))"

    return {
        "name": "kvceph-mp-server-alerts",
        "rules": [
            _alert(
                "KvcephMPServerDown",
                # the gate answers 502 when the server does not; a down engine is EngineDown's
                f'up{{{mp}}} == 0 unless on (instance) up{{job="{ENGINES_JOB}"}} == 0',
                "2m",
                "critical",
                "LMCache's MP server on {{ $labels.host }} does not answer /metrics (through "
                "engine {{ $labels.engine }}'s gate): its engines run without L1 or S3",
                "systemctl status / journalctl -u lmcache-server.service on the host",
            ),
            _alert(
                "KvcephMPServerL2Off",
                f'sum by (host) ({MP_L2_ADAPTERS}{{{mp},state="active"}}) == 0',
                "5m",
                "critical",
                "LMCache's MP server on {{ $labels.host }} has no active L2 adapter: KV is not "
                "saved to S3 nor read from it",
                "status.py (the server's /status l2_adapters); journalctl -u "
                "lmcache-server.service (the adapter's errors); restart it once S3 answers",
            ),
            _alert(
                "KvcephMPServerNoWorker",
                f"({by_host(MP_REQUESTED)} - {by_host(MP_HIT)}) > 0"
                f" unless on (host) {by_host(MP_STORES)} > 0"
                f' and on (host) max by (host) (up{{job="{ENGINES_JOB}"}}) == 1',
                "10m",
                "warning",
                "LMCache's MP server on {{ $labels.host }} is asked for prompts it has not got "
                "but stores none: no engine worker is registered with it (a server restart "
                "the engines missed, LMCache #4642)",
                "status.py (registered workers); restart the host's engines one at a time "
                "(deploy.py's roll) so they register again",
            ),
        ],
    }


def router_alert_rules() -> dict:
    """The ``kvceph-router-alerts`` group (inventories with a ``router`` group): a router
    instance that does not answer (its clients fail over to another router), and none
    answering (clients must reach the engines directly: docs/router.md "Fallback")."""
    up = f'up{{job="{ROUTER_JOB}"}}'
    return {
        "name": "kvceph-router-alerts",
        "rules": [
            _alert(
                "KvcephRouterDown",
                f"{up} == 0",
                "2m",
                "warning",
                "router route :{{ $labels.route }} on {{ $labels.host }} does not answer: its "
                "clients must use another router",
                "systemctl status / journalctl -u kvceph-router@{{ $labels.route }} on the host",
            ),
            _alert(
                "KvcephNoRouter",
                f"sum by (route) ({up}) == 0",
                "1m",
                "critical",
                "no router instance of route :{{ $labels.route }} answers",
                'clients to the engines directly (docs/router.md "Fallback"); '
                "systemctl status kvceph-router@{{ $labels.route }} on every router host",
            ),
        ],
    }
