"""status.py's router rows: each route's own readiness and its view of the workers (which
engines it sends requests to), read on the router host with the key file the router reads."""

from __future__ import annotations

from pyinfra.api import FactBase

from deploys.facts.probe_output import last_json_line, probe_command
from deploys.router import unit

_SCRIPT = """
import json, sys, urllib.error, urllib.request
port, timeout, keyfile = sys.argv[1], float(sys.argv[2]), sys.argv[3]
headers = {}
try:
    key = open(keyfile).read().strip()
    headers["Authorization"] = "Bearer " + key
except OSError:
    pass
out = {"readiness": None, "workers": None, "error": None}
def get(path):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
try:
    out["readiness"] = get("/readiness")[0]
    code, text = get("/workers")
    if code == 200:
        out["workers"] = [
            {"url": w["url"], "healthy": w["is_healthy"], "load": w.get("load")}
            for w in json.loads(text)["workers"]
        ]
    else:
        out["error"] = "/workers: HTTP %s" % code
except Exception as exc:
    out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
print(json.dumps(out))
"""


class RouterAnswers(FactBase):
    """
    What one route of the router answers on loopback: ``/readiness`` (status code: 200 while
    a worker is healthy) and ``/workers`` (each worker's URL and the router's health verdict).

    + python: an interpreter on the router host
    + port: the route's port
    + timeout: seconds per request

    Returns ``{"readiness": 200, "workers": [{"url", "healthy", "load"}], "error": None}``.
    A moment's answer: never memoised.
    """

    def default(self):
        return {"readiness": None, "workers": None, "error": "no answer"}

    def command(self, python: str, port: int, timeout: int = 5):
        failed = '{"error": "router probe failed"}'
        args = (port, timeout, unit.KEY_PATH)
        return probe_command(2 * timeout + 10, python, _SCRIPT, args, failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is None:
            return {**self.default(), "error": " ".join(output)[-300:] or "no answer"}
        return {**self.default(), **answer}


def read(host, me, checked) -> list[dict]:
    """Each route of the router host ``host``: its model, port, workers expected and seen."""
    from deploys.stages import router as stage

    rows = []
    for route in stage.routes(me, checked):
        answer = host.get_fact(RouterAnswers, python="python3", port=route.port)
        by_url = {w.url: w for w in route.workers}
        rows.append(
            {
                "host": me.host,
                "model": route.model,
                "port": route.port,
                "readiness": answer["readiness"],
                "error": answer["error"],
                "workers": [
                    {
                        "url": w["url"],
                        "healthy": w["healthy"],
                        "engine": f"{by_url[w['url']].host}/{by_url[w['url']].engine}"
                        if w["url"] in by_url
                        else "not in the inventory",
                    }
                    for w in answer["workers"] or []
                ],
                "missing": sorted(set(by_url) - {w["url"] for w in answer["workers"] or []}),
            }
        )
    return rows


def lines(rows: list[dict]) -> list[str]:
    """One line per route, then its workers out of the pool."""
    out = []
    for r in rows:
        head = f"ROUTER {r['host']}:{r['port']} {r['model']}: "
        if r["error"] or r["readiness"] != 200:
            out.append(head + f"NOT READY (readiness {r['readiness']}; {r['error'] or ''})")
            continue
        healthy = [w for w in r["workers"] if w["healthy"]]
        out.append(head + f"ready, {len(healthy)}/{len(r['workers'])} engines in the pool")
        for w in r["workers"]:
            if not w["healthy"]:
                out.append(f"  out of the pool: {w['engine']} {w['url']} (its /health fails)")
        for url in r["missing"]:
            out.append(f"  not a worker: {url} (redeploy: the router's config is stale)")
    return out


def problems(rows: list[dict]) -> list[str]:
    return [
        f"router {r['host']}:{r['port']}: {r['error'] or 'readiness ' + str(r['readiness'])}"
        for r in rows
        if r["error"] or r["readiness"] != 200
    ]
