"""Facts status.py reads besides the deploy's own: an engine's live answers, its unit's times,
the bucket's usage and the cluster's RGW daemons. All read-only, all bounded by ``timeout``."""

from __future__ import annotations

import json

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys.cluster.ceph_cli import ceph
from deploys.engine import engine_address
from deploys.facts.probe_output import ENGINE_HEADERS, last_json_line, probe_command
from deploys.facts.rgw import _RadosgwStatus, radosgw_json
from deploys.monitoring import counters, mp_server
from deploys.router import answers, unit

_ENGINE_SCRIPT = (
    """
import json, re, sys, urllib.request
"""
    + ENGINE_HEADERS
    + """
port, timeout, address = sys.argv[1], float(sys.argv[2]), sys.argv[4]
base = "http://%s:%s" % ("[%s]" % address if ":" in address else address, port)
out = {"health": None, "version": None, "metrics": None, "error": None}
headers = engine_headers(sys.argv[3])
def get(path):
    req = urllib.request.Request(base + path, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")
try:
    out["health"] = get("/health")[0]
except Exception as exc:
    out["health"] = getattr(exc, "code", None)
    out["error"] = ("/health: %s: %s" % (type(exc).__name__, exc))[:300]
for path, key in (("/version", "version"), ("/metrics", "metrics")):
    try:
        text = get(path)[1]
        out[key] = json.loads(text).get("version") if key == "version" else text
    except Exception as exc:
        out["error"] = out["error"] or ("%s: %s: %s" % (path, type(exc).__name__, exc))[:300]
print(json.dumps(out))
"""
)


class EngineAnswers(FactBase):
    """
    What a running engine answers on ``address`` (``engine_address.local`` of
    ``kvceph_vllm_bind``): ``GET /health`` (status code), ``/version`` and the ``/metrics``
    text, with the API key from ``secrets`` (read on the host) when set.

    + python: an interpreter on the host (the engine venv's)
    + port: the engine's port
    + timeout: seconds per request
    + secrets: the engine's secrets file (``VLLM_API_KEY=``)
    + address: where the host reaches the engine

    Returns ``{"health": 200, "version": "0.26.0", "counters": {...}, "error": None}``: the
    counters status.py reads, parsed from the /metrics text by ``deploys/monitoring/counters``
    (None when /metrics did not answer); ``error`` names the first request that failed. A
    moment's answer: never memoised.
    """

    def default(self):
        return {"health": None, "version": None, "counters": None, "error": "no answer"}

    def command(
        self,
        python: str,
        port: int,
        timeout: int = 10,
        secrets: str = "/dev/null",
        address: str = "127.0.0.1",
    ):
        failed = '{"error": "engine probe failed"}'
        args = (port, timeout, secrets, address)
        return probe_command(3 * timeout + 10, python, _ENGINE_SCRIPT, args, failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is None:
            return {**self.default(), "error": " ".join(output)[-300:] or "no answer"}
        text = answer.pop("metrics", None)
        parsed = None if text is None else counters.as_dict(counters.from_text(text))
        return {**self.default(), **answer, "counters": parsed}


_MP_SCRIPT = """
import json, sys, urllib.request
base, timeout = sys.argv[1], float(sys.argv[2])
out = {"status": None, "metrics": None, "error": None}
for path, key in (("/status", "status"), ("/metrics", "metrics")):
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as r:
            text = r.read().decode("utf-8", "replace")
        out[key] = json.loads(text) if key == "status" else text
    except Exception as exc:
        out["error"] = out["error"] or ("%s: %s: %s" % (path, type(exc).__name__, exc))[:300]
print(json.dumps(out))
"""


class MPServerAnswers(FactBase):
    """
    What LMCache's MP server answers on its loopback HTTP port: ``GET /status`` and
    ``/metrics``, summarised by ``deploys/monitoring/mp_server.summary`` (no authentication in
    LMCache 0.5.6, hence loopback only, read on the host itself).

    + python: an interpreter on the host (the engine venv's)
    + base: the server's HTTP base, e.g. http://127.0.0.1:8090
    + timeout: seconds per request

    Returns ``{"healthy": True, "l1_used_bytes": 0, "l1_total_bytes": 1073741824, "l2": [{"type":
    "KvcephMPConnector", "healthy": True, "disabled": False}], "workers": 0, "l1_hits": None,
    "l2_hits": None, "error": None}``. A moment's answer: never memoised.
    """

    def default(self):
        return {"healthy": None, "error": "no answer"}

    def command(self, python: str, base: str, timeout: int = 5):
        failed = '{"error": "MP server probe failed"}'
        return probe_command(2 * timeout + 10, python, _MP_SCRIPT, (base, timeout), failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is None:
            return {**self.default(), "error": " ".join(output)[-300:] or "no answer"}
        got = mp_server.summary(answer.get("status"), answer.get("metrics"))
        return {**got, "error": answer.get("error") or got.get("error")}


class UnitTimes(FactBase):
    """
    When a unit entered its present state and when its main process started (systemd's own
    words): ``{"active": "active", "sub": "running", "main_pid": 123, "since": "Tue 2026-12-01
    20:01:02.123456 UTC", "started": "...", "result": "success", "restarts": 0}``. ``since`` is
    when it became active, or for a unit that is not, when it stopped being so; times are None
    where systemd has none (n/a). ``result`` is systemd's ``Result`` (``start-limit-hit``: a
    crash loop that systemd gave up restarting), ``restarts`` its ``NRestarts`` (automatic
    restarts since the unit was last started by hand or by kvceph); None where not reported.

    + unit: the systemd unit
    """

    def default(self):
        return {
            "active": "unknown",
            "sub": None,
            "main_pid": 0,
            "since": None,
            "started": None,
            "result": None,
            "restarts": None,
        }

    def command(self, unit: str):
        props = (
            "-p ActiveState -p SubState -p MainPID -p ActiveEnterTimestamp"
            " -p InactiveEnterTimestamp -p ExecMainStartTimestamp -p Result -p NRestarts"
        )
        # --timestamp=us+utc needs systemd >= 248; older ones print local time.
        return StringCommand(
            "timeout 20 systemctl show --timestamp=us+utc",
            props,
            QuoteString(unit),
            "2>/dev/null || timeout 20 systemctl show",
            props,
            QuoteString(unit),
        )

    def process(self, output):
        found = self.default()
        names = {
            "ActiveState": "active",
            "SubState": "sub",
            "MainPID": "main_pid",
            "ActiveEnterTimestamp": "active_since",
            "InactiveEnterTimestamp": "inactive_since",
            "ExecMainStartTimestamp": "started",
            "Result": "result",
            "NRestarts": "restarts",
        }
        seen = {}
        for line in output:
            key, _, value = line.strip().partition("=")
            if key in names:
                seen[names[key]] = value if value and value != "n/a" else None
        found["active"] = seen.get("active") or "unknown"
        found["sub"] = seen.get("sub")
        pid = seen.get("main_pid") or ""
        found["main_pid"] = int(pid) if pid.isdigit() else 0
        found["started"] = seen.get("started")
        found["result"] = seen.get("result")
        restarts = seen.get("restarts") or ""
        found["restarts"] = int(restarts) if restarts.isdigit() else None
        active = found["active"] in ("active", "reloading", "deactivating")
        found["since"] = seen.get("active_since" if active else "inactive_since")
        return found


class BucketUsage(_RadosgwStatus):
    """
    A bucket's objects, bytes and quota (``radosgw-admin bucket stats``), None when the bucket
    does not exist. Bytes are RGW's ``size`` (the objects' own bytes, what a listing sums; RGW's
    ``size_actual`` rounds each object up to 4 KiB) over every category of the bucket's usage.

    + bucket: the bucket
    + timeout: seconds for radosgw-admin

    Returns ``{"objects": 128, "bytes": 4194304, "quota": {"enabled": True, "max_size":
    4294967296, "max_objects": -1}}``.
    """

    def command(self, bucket: str, timeout: int = 60):
        # RgwBucket's runner: a missing bucket prints null, any other failure exits non-zero.
        return radosgw_json(timeout, "usage", "bucket", "stats", f"--bucket={bucket}")

    def summary(self, data: dict):
        usage = data.get("usage") or {}
        quota = data.get("bucket_quota") or {}
        return {
            "objects": sum(int(u.get("num_objects", 0)) for u in usage.values()),
            "bytes": sum(int(u.get("size", 0)) for u in usage.values()),
            "quota": {
                "enabled": bool(quota.get("enabled")),
                "max_size": int(quota.get("max_size", -1)),
                "max_objects": int(quota.get("max_objects", -1)),
            },
        }


class RgwDaemons(FactBase):
    """
    The RGW daemons the manager's service map lists (``ceph service dump``): every radosgw that
    reports to the cluster, whoever runs it (cephadm, the lab's units, another tool).

    + connect_timeout, command_timeout: as every ceph call (deploys/cluster/ceph_cli.py)

    Returns ``{"gw1": {"hostname": "ceph1", "frontend": "beast endpoint=127.0.0.1:7480"}}``
    (by the daemon's id, as in ``client.rgw.<id>``); None when no
    mon answered. A daemon that stopped stays listed until the manager's beacon grace ends.
    """

    def command(self, connect_timeout: int = 10, command_timeout: int = 60):
        return ceph(
            "service",
            "dump",
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
        )

    def process(self, output):
        try:
            dump = json.loads("\n".join(output))
        except ValueError:
            return None
        daemons = (dump.get("services", {}).get("rgw") or {}).get("daemons") or {}
        found = {}
        for name, daemon in daemons.items():
            if not isinstance(daemon, dict):
                continue  # "summary": a string
            meta = daemon.get("metadata") or {}
            found[str(meta.get("id") or name)] = {
                "hostname": meta.get("hostname"),
                "frontend": meta.get("frontend_config#0"),
            }
        return dict(sorted(found.items()))


_ROUTER_SCRIPT = """
import json, sys, urllib.error, urllib.request
port, timeout, keyfile = sys.argv[1], float(sys.argv[2]), sys.argv[3]
host = sys.argv[4] if len(sys.argv) > 4 else "127.0.0.1"
headers = {}
try:
    headers["Authorization"] = "Bearer " + open(keyfile).read().strip()
except OSError:
    pass
out = {"readiness": None, "workers": None, "error": None}
def get(path):
    req = urllib.request.Request("http://%s:%s%s" % (host, port, path), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
try:
    out["readiness"] = get("/readiness")[0]
    code, text = get("/workers")
    if code == 200:
        out["workers"] = text
    else:
        out["error"] = "/workers: HTTP %s" % code
except Exception as exc:
    out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
print(json.dumps(out))
"""


class RouterAnswers(FactBase):
    """
    What one route of the router answers where the router listens (loopback of its family
    for a wildcard ``kvceph_router_bind``, else the bind address itself), with the key file
    the router reads (root 0600, read on the host: the key never leaves it): ``/readiness``
    (status code: 200 while a worker is healthy) and ``/workers`` (each worker's URL, the
    router's health verdict and its load; parsed by ``deploys/router/answers.workers``).

    + python: an interpreter on the router host
    + port: the route's port
    + timeout: seconds per request
    + address: where the host reaches the router (``engine_address.local`` of its bind)

    Returns ``{"readiness": 200, "workers": [{"url", "healthy", "load"}], "error": None}``
    (``workers`` None when ``/workers`` did not answer). A moment's answer: never memoised.
    """

    def default(self):
        return {"readiness": None, "workers": None, "error": "no answer"}

    def command(self, python: str, port: int, timeout: int = 5, address: str = "127.0.0.1"):
        failed = '{"error": "router probe failed"}'
        args = (port, timeout, unit.KEY_PATH, engine_address.url_host(address))
        return probe_command(2 * timeout + 10, python, _ROUTER_SCRIPT, args, failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is None:
            return {**self.default(), "error": " ".join(output)[-300:] or "no answer"}
        found = {**self.default(), **answer}
        if isinstance(found["workers"], str):
            try:
                found["workers"] = answers.workers(found["workers"])
            except ValueError as exc:
                found["workers"], found["error"] = None, str(exc)
        return found


class KvNamespaces(FactBase):
    """
    The KV bucket's object namespaces (``kv/<fields>/`` folders, deploys/settings/namespace.py)
    and whether objects sit at its root, read with the owner's keys on the Ceph admin host by
    two delimiter listings (read-only, 1000 entries each). None when the key file is not there
    or the listing failed.

    + bucket: the KV bucket
    + admin_script: s3admin.py on the host
    + config: the owner's private INI

    Returns ``{"namespaces": ["kv/Qwen%2FQwen3-32B@tp2@pp1@-@bfloat16@c256@kv-split@naive@none/"],
    "bucket_root": False, "truncated": False}``.
    """

    def command(self, bucket: str, admin_script: str, config: str):
        return StringCommand(
            "if test -f", QuoteString(config), "; then python3", QuoteString(admin_script),
            "--config", QuoteString(config), "list-namespaces", QuoteString(bucket),
            "|| echo null; else echo null; fi",
        )  # fmt: skip

    @staticmethod
    def default():
        return None

    def process(self, output):
        try:
            found = json.loads("\n".join(output) or "null")
        except ValueError:
            return None
        return found if isinstance(found, dict) else None
