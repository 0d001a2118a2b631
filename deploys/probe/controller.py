"""pyinfra glue for probe.py: run the remote probe on every inference host, one at a time.

One host at a time, so that each host's figures are its own path to RGW, not a share of it
(the same reason verify.py measures one host at a time). Kept out of probe.py (which pyinfra
executes per host) so that tests can import it.
"""

from __future__ import annotations

import json
import shlex
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pyinfra import logger

from deploys import render
from deploys.probe import report as reporting
from deploys.probe import verdicts
from deploys.settings import namespace
from deploys.tier import kv_sizing
from deploys.verification import transport
from deploys.verification.controller import SshControl

SCRIPT = Path(__file__).resolve().parent.parent / "remote" / "s3probe.py"


def shape_of(me) -> verdicts.Shape:
    """The host's LMCache object shape, from the same derivation as its lmcache.yaml."""
    sizing = kv_sizing.for_host(me)
    return verdicts.Shape(
        chunk_size=me.lmcache.chunk_size,
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        tensor_parallel_size=me.engine.tensor_parallel_size,
    )


def probe_args(me, nonce: str) -> list[str]:
    """s3probe.py's arguments for this host: endpoint, region, TLS and I/O threads (kvceph's
    connector: its core, connections and timeout) as the engine reads them from lmcache.yaml
    (``render.lmcache_config``), object size from the same derivation, so the probe takes the
    path the engine takes."""
    e, lmc, probe = me.engine, me.lmcache, me.probe
    config = render.lmcache_config(me)
    extra = config["extra_config"]
    chunks = max(1, probe.tokens // lmc.chunk_size)
    kvceph = "remote_storage_plugins" in config  # kvceph's connector: its own kvceph.* keys
    if kvceph:
        endpoint, region = extra["kvceph.endpoint"], extra["kvceph.region"]
        threads, tls, http2 = extra["kvceph.connections"], extra["kvceph.tls"], False
    else:
        endpoint, region = config["remote_url"].removeprefix("s3://"), extra["s3_region"]
        # LMCache reads these with bool(): the same here.
        threads = int(extra.get("s3_num_io_threads", 64))
        tls = not bool(extra.get("disable_tls", False))
        http2 = bool(extra.get("s3_prefer_http2", True))
    argv = [
        "--endpoint",
        endpoint,
        "--region",
        str(region),
        "--chunk-bytes",
        str(kv_sizing.chunk_bytes(me)),
        "--chunks",
        str(chunks),
        "--workers",
        str(e.tensor_parallel_size),
        "--io-threads",
        str(threads),
        "--rounds",
        str(probe.rounds),
        "--nonce",
        nonce,
        # The cache group's own names: the only ones its key may write (bucket_policy.py).
        "--prefix",
        group_prefix(me),
    ]
    if not tls:
        argv.append("--disable-tls")
    if http2:
        argv.append("--prefer-http2")
    if kvceph:
        # s3probe.py measures through the connector's own S3 core, with its knobs.
        argv += ["--connector", "kvceph", "--connections", str(threads)]
        argv += ["--timeout-s", repr(float(extra["kvceph.timeout_s"]))]
    return argv


def group_prefix(me) -> str:
    """The object-name prefix of this host's cache group (as preflight derives it)."""
    # Under the group's current namespace: within its grant, and where its engines write.
    return namespace.prefix(me) or namespace.object_prefix(me)


def leftovers(me, nonce: str) -> str:
    """The names a probe of this host writes start with this."""
    return f"{group_prefix(me)}kvceph-probe-{nonce}@"


def probe_command(me, nonce: str) -> str:
    """The remote command: the engine venv's python as the service user, keys from its ~/.aws."""
    e = me.engine
    head = ["timeout", str(me.probe.timeout), "runuser", "-u", e.service_user, "--", "env"]
    head += [f"HOME={e.service_home}", f"AWS_PROFILE={me.s3.profile}"]
    return shlex.join(
        [*head, f"{e.venv}/bin/python", "-c", SCRIPT.read_text(), *probe_args(me, nonce)]
    )


def parse_output(output: str) -> dict:
    """The remote probe's JSON (its last line starting with '{'); ValueError when absent."""
    for line in reversed(output.split("; ")):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(output[-300:] or "no output")


def admin_bucket(checked, me) -> transport.Boto3Bucket:
    """The bucket with the admin key, as verify.py reaches it from the controller."""
    vs = me.verify
    return transport.Boto3Bucket(
        endpoint=vs.s3_endpoint or me.s3.endpoint,
        bucket=me.s3.bucket,
        region=me.s3.region,
        credentials=checked.credentials.admin(),
        timeout=vs.s3_timeout,
        max_objects=vs.max_listed_objects,
        ca_bundle=me.security.s3_ca_bundle,
    )


def run_probe(state, host, checked, inv) -> bool:
    """Probe every inference host, then print the table and write the report.

    With ``state`` and ``host`` in its signature pyinfra runs it directly and takes its return
    value as the operation's status: False when a host could not be probed.
    """
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    ssh = SshControl(inv)
    inference = [h for h in checked.hosts.values() if h.is_inference]
    report_dir = inference[0].verify.report_dir
    verify = reporting.read_json(Path(report_dir) / reporting.VERIFY_LATEST)
    group_of = {name: g.hosts for g in checked.cache_groups for name in g.hosts}
    results, ok = [], True
    for me in inference:
        nonce = f"{run_id}-{me.host}"
        logger.info(f"kvceph probe: {me.host}: PUT/GET {me.probe.rounds} rounds (nonce {nonce})")
        good, out = ssh.run(me.host, probe_command(me, nonce), me.probe.timeout)
        try:
            raw = parse_output(out)
        except ValueError as exc:
            ok = False
            error = out.rsplit("; ", 1)[-1][-300:] if not good else f"unreadable output: {exc}"
            results.append({"host": me.host, "error": error})
            continue
        if raw.get("deleted", 0) < raw.get("objects", 0):
            # A group's key may not delete (bucket_policy.py): the admin key does, from here.
            bucket = admin_bucket(checked, me)
            raw["deleted"] = raw.get("deleted", 0) + bucket.delete(
                list(bucket.list(leftovers(me, nonce)))
            )
        results.append(
            reporting.host_result(
                me.host,
                shape_of(me),
                raw,
                me.lmcache.prefill_tokens_per_s,
                reporting.verify_figures(verify, group_of[me.host]),
            )
        )
    document = {
        "run_id": run_id,
        "started": run_id.split("-")[0],
        "prompt_tokens": list(verdicts.PROMPT_TOKENS),
        "pays_margin": verdicts.PAYS_MARGIN,
        "verify_run": (verify or {}).get("run_id"),
        "hosts": results,
    }
    print(reporting.table(results), flush=True)
    path = reporting.write(document, report_dir)
    logger.info(f"kvceph probe: report {path}")
    for r in results:
        if "error" in r:
            logger.error(f"kvceph probe FAILED: {r['host']}: {r['error']}")
        elif r["deleted"] != r["objects"]:
            ok = False
            logger.error(
                f"kvceph probe: {r['host']}: {r['objects'] - r['deleted']} probe objects left "
                "behind (the bucket's lifecycle expires them)"
            )
    return ok
