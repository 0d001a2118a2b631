"""The status document: what was read, turned into one row per engine and one per cluster.

Pure: the collected facts (deploys/status/collect.py), the settings and the reports in, a dict
out (the JSON file; the table and the chart are drawn from it). A host that could not be read
is a row that says so; ``partial`` is True when any host or read is missing.
"""

from __future__ import annotations

from deploys.cluster import cache_trim, capacity
from deploys.monitoring import counters, savings, tiers
from deploys.monitoring.targets import cache_group
from deploys.settings import namespace
from deploys.status.reports import age
from deploys.tier import remote_tier

UNREACHABLE = "unreachable"
# A host left out with --limit: a row, but not a failure (the operator asked for part).
OUTSIDE = "outside this run (--limit)"


def _version(answers: dict, versions: dict | None, profile) -> dict:
    packages = (versions or {}).get("packages") or {}
    lab = packages.get("kvceph-lab-engine")
    return {
        # What the running process says (GET /version), else what the venv holds.
        "vllm": answers.get("version") or packages.get("vllm"),
        "vllm_installed": packages.get("vllm"),
        "vllm_desired": profile.vllm_version,
        "lab_engine": lab,  # the lab's stand-in (it answers /version as the vLLM it emulates)
        "lmcache": packages.get("lmcache"),
        "lmcache_desired": profile.lmcache_version,
        "python": (versions or {}).get("python"),
    }


def engine_rows(name: str, me, read: dict | None, probe: dict | None, error: str | None):
    """One row per engine of host ``name``; ``read`` is collect.read_engines' answer, None with
    ``error`` when the host could not be read."""
    e = me.engine
    if read is None:
        return [
            {
                "host": name,
                "engine": engine.name,
                "unit": engine.unit,
                "reachable": False,
                "error": error or UNREACHABLE,
                "probe": probe,
            }
            for engine in e.engines
        ]
    rows = []
    for item in read["engines"]:
        state, times, answers = item["state"], item["times"], item["answers"]
        raw = answers.get("counters")
        c = counters.from_dict(raw or {})
        figure = savings.prefill_seconds_per_token(me, c.mean_prompt_tokens)
        tier = tiers.split(
            c.local_hits, c.lmcache_hit_tokens, c.remote_read_bytes, me.lmcache.kv_bytes_per_token
        )
        reused = c.reused_tokens
        drifted = bool(item["reasons"])
        rows.append(
            {
                "host": name,
                "engine": item["engine"],
                "unit": item["unit"],
                "port": item["port"],
                "reachable": True,
                "active": times.get("active"),
                "sub_state": times.get("sub"),
                "result": times.get("result"),
                "restarts": times.get("restarts"),
                "since": times.get("since"),
                "main_pid": state.get("main_pid"),
                **_version(answers, read["versions"], e.profile),
                "running_digest": state.get("digest"),
                "desired_digest": item["desired_digest"],
                # When LMCache's stock S3 connector turned S3 off in this start (None: it did
                # not, or kvceph's connector, which never does).
                "s3_disabled_at": remote_tier.s3_off_at(item.get("s3_off")),
                # kvceph_skip_short_puts: the connector's latest logged count (None: off).
                "puts_skipped": _puts_skipped(item.get("puts_skipped")),
                # kvceph_connector_verify_crc32c: the connector's latest logged count (None: off).
                "crc32c_refused": _crc32c_refused(item.get("crc32c_refused")),
                "drift": drifted,
                "drift_reasons": item["reasons"],
                # Only meaningful with drift: the host's files may already be the desired ones
                # (written, not yet restarted), then the reasons say what runs differs.
                "drift_settings": item["settings"],
                "health": answers.get("health"),
                "metrics_error": answers.get("error") if raw is None else None,
                "missing_metrics": counters.missing(c) if raw is not None else [],
                **c.to_dict(),
                "prefill_seconds_per_token": figure.seconds_per_token,
                "prefill_source": figure.source,
                "prefill_measured": figure.measured,
                "prefill_at_tokens": figure.at_tokens,
                "saved_gpu_seconds": savings.saved_seconds(reused, figure),
                **tier.to_dict(),
                "tier_saved_gpu_seconds": {
                    name: savings.saved_seconds(tokens, figure)
                    for name, tokens in (("gpu", tier.gpu), ("dram", tier.dram), ("s3", tier.s3))
                },
                "probe": probe,
            }
        )
    return rows


def _quota(cluster: dict) -> tuple[int | None, str | None]:
    """(bytes, where the quota is set): its owner's user quota (what kvceph sets), else the
    bucket's own, else its owner's per-bucket quota (what kvceph set before issue 36)."""
    user_quota = cluster.get("user_quota") or {}
    if user_quota.get("enabled") and user_quota.get("max_size", -1) > 0:
        return int(user_quota["max_size"]), "user quota"
    bucket = (cluster.get("bucket") or {}).get("quota") or {}
    if bucket.get("enabled") and bucket.get("max_size", -1) > 0:
        return bucket["max_size"], "bucket"
    user = cluster.get("user_bucket_quota") or {}
    if user.get("enabled") and user.get("max_size", -1) > 0:
        return int(user["max_size"]), "user's bucket quota"
    return None, None


def _quota_full(bucket: dict | None, quota: int | None, stats: dict | None) -> dict:
    """Whether RGW refuses the next chunk, and since when (the user's stats last changed)."""
    if not quota or not bucket:
        return {"quota_full": None, "quota_full_since": None}
    full = capacity.is_full(bucket.get("bytes", 0), bucket.get("objects", 0), quota)
    since = (stats or {}).get("last_stats_update") if full else None
    return {"quota_full": full, "quota_full_since": since}


def trim_rows(trim: dict | None) -> list[dict]:
    """Each cache group's bytes against its share, its fill rate and days to full, as the
    trim timer last read them (deploys/cluster/cache_trim.py); [] when it never ran."""
    rows = []
    for prefix, t in sorted((trim or {}).items()):
        used, share, rate = int(t.get("used", 0)), int(t.get("share", 0)), t.get("rate")
        rows.append(
            {
                "prefix": prefix,
                "bytes": used,
                "share_bytes": share,
                "share_used": used / share if share else None,
                "fill_rate": rate,
                "days_to_full": cache_trim.days_to_full(used, share, rate),
                "deleted": int(t.get("deleted", 0)),
                "read_at": t.get("time"),
            }
        )
    return rows


def _rule(rules, rule_id: str) -> dict | None:
    for r in rules or []:
        if r.get("ID") == rule_id:
            return r
    return None


def cluster_row(name: str, me, read: dict | None, error: str | None) -> dict:
    """The cluster's row, read from the Ceph admin host ``name``."""
    s3 = me.s3
    if read is None:
        return {"host": name, "reachable": False, "error": error or UNREACHABLE}
    bucket = read.get("bucket")
    quota, quota_source = _quota(read)
    rule = _rule(read.get("lifecycle"), s3.lifecycle_rule_id)
    expiry = ((rule or {}).get("Expiration") or {}).get("Days")
    daemons = read.get("daemons")
    row = {
        "host": name,
        "reachable": True,
        "mon": (read.get("mon") or {}).get("reachable"),
        "mon_health": (read.get("mon") or {}).get("health"),
        "bucket": s3.bucket,
        "bucket_exists": bucket is not None if "bucket" in read else None,
        "objects": (bucket or {}).get("objects"),
        "bytes": (bucket or {}).get("bytes"),
        "quota_bytes": quota,
        "quota_source": quota_source,
        "quota_used": (bucket or {}).get("bytes", 0) / quota if quota and bucket else None,
        **_quota_full(bucket, quota, read.get("user_stats")),
        "lifecycle_rule": s3.lifecycle_rule_id,
        "lifecycle_present": None if "lifecycle" not in read else rule is not None,
        "lifecycle_enabled": (rule or {}).get("Status") == "Enabled" if rule else None,
        "lifecycle_expiration_days": expiry,
        "rgw_managed_by": me.rgw.managed_by,
        "rgw_daemons": daemons,
        "rgw_daemons_up": None if daemons is None else len(daemons),
        "endpoint": (read.get("endpoint") or {}).get("url"),
        "endpoint_reachable": (read.get("endpoint") or {}).get("reachable"),
        "endpoint_status": (read.get("endpoint") or {}).get("status"),
        "groups": trim_rows(read.get("trim")),
    }
    if me.rgw.managed_by == "cephadm":
        orch = read.get("orchestrator") or {}
        row["orchestrator"] = orch.get("backend") if orch.get("available") else orch.get("error")
        services = {}
        for service, seen in (read.get("services") or {}).items():
            if seen.get("export") is None:
                continue  # a layout the stage did not choose (concentrator vs ingress)
            daemons_of = seen.get("daemons") or []
            services[service] = {
                "size": seen.get("size"),
                "running": sum(1 for d in daemons_of if d.get("status") == "running"),
                "daemons": {d["name"]: d.get("status") for d in daemons_of},
                "concentrator": (seen["export"].get("spec") or {}).get("concentrator"),
                "errors": seen.get("errors") or [],
            }
        row["services"] = services
    return row


def namespace_rows(found: dict | None, hosts: dict) -> list[dict]:
    """Each namespace the bucket holds, with the cache groups that write it now; a row
    without groups is an old namespace its lifecycle rule has yet to empty.

    + found: the KvNamespaces fact (None: not read). + hosts: name -> HostSettings
    """
    if not found:
        return []
    writers: dict[str, set[str]] = {}
    for me in hosts.values():
        if me.is_inference:
            writers.setdefault(namespace.prefix(me), set()).add(cache_group(me))
    rows = [
        {"namespace": ns, "groups": sorted(writers.get(ns, ())), "current": ns in writers}
        for ns in found.get("namespaces") or ()
    ]
    if found.get("bucket_root"):  # LMCache's own names (stock connector, pre-namespace)
        rows.append(
            {"namespace": "", "groups": sorted(writers.get("", ())), "current": "" in writers}
        )
    return rows


def problems(doc: dict) -> list[str]:
    """What makes the status partial: hosts not read, reads that failed. One line each."""
    out = []
    for r in doc["engines"]:
        label = f"{r['host']} {r['unit']}"
        if not r["reachable"] and r["error"] != OUTSIDE:
            out.append(f"{label}: {r['error']}")
        elif r.get("metrics_error"):
            out.append(f"{label}: no /metrics ({r['metrics_error']})")
    c = doc["cluster"]
    if c and not c["reachable"]:
        if c["error"] != OUTSIDE:
            out.append(f"{c['host']}: {c['error']}")
    elif c and not c.get("mon"):
        out.append(f"{c['host']}: no mon answered: bucket, quota, lifecycle and daemons unread")
    return list(dict.fromkeys(out))


def totals(rows: list[dict]) -> dict:
    """Fleet sums over the engines read (hit ratio over all queries)."""
    read = [r for r in rows if r["reachable"]]
    q = sum(r.get("external_queries") or 0 for r in read)
    h = sum(r.get("external_hits") or 0 for r in read)
    return {
        "engines": len(rows),
        "engines_read": len(read),
        "requests": sum(r.get("requests") or 0 for r in read),
        "external_queries": q,
        "external_hits": h,
        "hit_ratio": h / q if q else None,
        "reused_tokens": sum(r.get("reused_tokens") or 0 for r in read),
        "saved_gpu_seconds": sum(r.get("saved_gpu_seconds") or 0 for r in read),
        # per tier: None when no engine exports that tier's counter
        **{
            key: _sum_known(r.get(key) for r in read)
            for key in ("tier_gpu_tokens", "tier_dram_tokens", "tier_s3_tokens")
        },
    }


def _sum_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def summary_line(doc: dict) -> str:
    """The last line of the table: the fleet's hits and saved time, and the verify age."""
    t, v = doc["totals"], doc["verify"]
    ratio = "-" if t["hit_ratio"] is None else f"{t['hit_ratio']:.1%}"
    return (
        f"fleet: {t['engines_read']}/{t['engines']} engines read, {t['requests']:.0f} requests, "
        f"LMCache hits {t['external_hits']:.0f}/{t['external_queries']:.0f} tokens ({ratio}), "
        f"GPU prefill saved {t['saved_gpu_seconds']:.1f} s; last verify: {v['verdict']}"
        + (f" {age(v['age_s'])} ago" if v.get("age_s") is not None else "")
    )


def _crc32c_refused(fact: dict | None) -> dict | None:
    """{"refused", "checked", "at"} from the Crc32cRefused fact; zeros and no time while none
    was refused in this start; None where it was not read (the check off, or not read)."""
    if not fact or not fact.get("started"):
        return None
    return {
        "refused": fact.get("refused") or 0,
        "checked": fact.get("checked") or 0,
        "at": fact.get("at"),
    }


def _puts_skipped(fact: dict | None) -> dict | None:
    """{"skipped", "stored", "at"} from the PutsSkipped fact; zeros and no time while nothing
    was logged in this start; None where it was not read (kvceph_skip_short_puts off)."""
    if not fact or not fact.get("started"):
        return None
    return {
        "skipped": fact.get("skipped") or 0,
        "stored": fact.get("stored") or 0,
        "at": fact.get("at"),
    }
