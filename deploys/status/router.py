"""status.py's router rows: each route's own readiness and its view of the workers (which
engines it sends requests to), read on the router host with the key file the router reads."""

from __future__ import annotations

from deploys.engine import engine_address
from deploys.facts.status import RouterAnswers


def read(host, me, checked) -> list[dict]:
    """Each route of the router host ``host``: its model, port, workers expected and seen."""
    from deploys.stages import router as stage

    rows = []
    for route in stage.routes(me, checked):
        answer = host.get_fact(
            RouterAnswers,
            python="python3",
            port=route.port,
            address=engine_address.local(me.router.bind),
        )
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
