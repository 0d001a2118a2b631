"""pyinfra glue for status.py: read every host at once, build the document, write the outputs.

Runs once per pyinfra run, while pyinfra loads status.py for the first connected host (the
others wait, as for the preflight): no operation is ever created, so a status run changes
nothing and pyinfra reports no change. Hosts are read side by side (gevent), one command
batch per host for its state facts plus one request batch per engine.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import gevent
from gevent.lock import BoundedSemaphore
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from deploys.monitoring import mp_server, status_metrics
from deploys.status import collect, document, drift, output, reports
from deploys.status import router as status_router

_ONCE = BoundedSemaphore()
# The run's document, kept on its State object (an id(state) key outlives its State).
_DONE_ATTR = "_kvceph_status_doc"


class StatusPartial(PyinfraError):
    """Some host or read is missing: the outputs are written, the run exits non-zero."""


def _error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{document.UNREACHABLE}: {type(exc).__name__}: {text}"[:300]


def _read(target, me, checked) -> tuple[dict | None, dict | None, str | None]:
    """(engines, cluster, error) of one host."""
    try:
        engines = collect.read_engines(target, me, checked) if me.is_inference else None
        cluster = collect.read_cluster(target, me) if me.is_ceph_admin and me.ceph else None
        return engines, cluster, None
    except Exception as exc:  # noqa: BLE001 - a host lost mid-read is a row, not a crash
        return None, None, _error(exc)


def outputs(data, report_dir: str, run_id: str) -> tuple[Path, Path]:
    """(JSON path, PNG path): ``kvceph_status_json`` / ``kvceph_status_png`` when set, else
    ``status-<run>.json`` / ``.png`` in the report directory (plus ``status-latest.json``)."""
    directory = Path(report_dir)
    json_path = data.get("kvceph_status_json") or directory / f"status-{run_id}.json"
    png_path = data.get("kvceph_status_png") or directory / f"status-{run_id}.png"
    return Path(json_path), Path(png_path)


def build(state, inventory, checked) -> dict:
    """Read every host and return the status document (hosts not connected are rows)."""
    now = datetime.now(UTC)
    jobs, errors = {}, {}
    for name, me in checked.hosts.items():
        if not (me.is_inference or me.is_ceph_admin):
            continue
        target = inventory.get_host(name)
        if not target.connected:
            outside = not state.is_host_in_limit(target)
            errors[name] = (
                document.OUTSIDE
                if outside
                else f"{document.UNREACHABLE}: SSH connect failed (pyinfra's line above says why)"
            )
            continue
        jobs[name] = gevent.spawn(_read, target, me, checked)
    gevent.joinall(list(jobs.values()))
    results = {name: job.value for name, job in jobs.items()}
    first = next(h for h in checked.hosts.values() if h.is_inference)
    report_dir = first.verify.report_dir
    probes = reports.last_probes(report_dir, now)
    rows, cluster, in_use, found, mp = [], None, {}, None, {}
    for name, me in checked.hosts.items():
        engines, cluster_read, error = results.get(name) or (None, None, errors.get(name))
        if me.is_inference:
            rows += document.engine_rows(name, me, engines, probes.get(name), error)
            if engines:
                in_use[name] = engines["cache_key"]
                if "mp_server" in engines:  # MP mode only: in-process hosts unchanged
                    mp[name] = engines["mp_server"]
        if me.is_ceph_admin:
            cluster = document.cluster_row(name, me, cluster_read, error)
            found = (cluster_read or {}).get("namespaces")
    figure_note = rows and next(
        (r["prefill_source"] for r in rows if r.get("prefill_source")), None
    )
    doc = {
        "run": now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6],
        "time": now.isoformat(),
        "engines": rows,
        "cluster": cluster,
        "cache_group_splits": drift.group_splits(in_use, checked.cache_groups),
        "namespaces": document.namespace_rows(found, checked.hosts),
        "mp_servers": mp,
        "inference_hosts": [n for n, me in checked.hosts.items() if me.is_inference],
        "verify": reports.last_verify(report_dir, now),
        "probes": probes,
        "prefill_note": figure_note or "no engine read",
        "totals": document.totals(rows),
    }
    doc["routers"] = _routers(inventory, checked)
    doc["problems"] = document.problems(doc) + status_router.problems(doc["routers"])
    doc["problems"] += mp_server.problems(mp)
    doc["partial"] = bool(doc["problems"])
    return doc


def _routers(inventory, checked) -> list[dict]:
    """The router hosts' routes (deploys/status/router.py); a host not read is a row."""
    rows = []
    for name, me in checked.hosts.items():
        if me.router is None:
            continue
        try:
            rows += status_router.read(inventory.get_host(name), me, checked)
        except Exception as exc:  # noqa: BLE001 - a host lost mid-read is a row, not a crash
            rows.append(
                {
                    "host": name,
                    "model": "",
                    "port": me.router.port,
                    "readiness": None,
                    "error": _error(exc),
                    "workers": [],
                    "missing": [],
                }
            )
    return rows


# pyinfra's results table of a run without operations (status.py never makes one): a header,
# then `Grand total - - - -`, after the status itself (issue 53 item 8).
_EMPTY_RESULTS = re.compile(
    r"--> Results:|Operation\s+Hosts\s+Success\s+Error\s+No Change|Grand total(\s+-){4}"
)


class EmptyResults(logging.Filter):
    """Drops pyinfra's empty results table (the ``--> Results:`` line, its header and an
    all-dash ``Grand total``); every other line passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _EMPTY_RESULTS.fullmatch(record.getMessage().strip())


def hide_empty_results(log: logging.Logger = logger) -> None:
    """Install :class:`EmptyResults` on pyinfra's logger once (status.py's run only)."""
    if not any(isinstance(f, EmptyResults) for f in log.filters):
        log.addFilter(EmptyResults())


def run(state, inventory, checked) -> dict:
    """Once per run: build, print, write; then StatusPartial when something was not read."""
    hide_empty_results()
    with _ONCE:
        doc = getattr(state, _DONE_ATTR, None)
        if doc is not None:
            return doc
        doc = build(state, inventory, checked)
        setattr(state, _DONE_ATTR, doc)
    first = next(h for h in checked.hosts.values() if h.is_inference)
    report_dir = first.verify.report_dir
    json_path, png_path = outputs(inventory.get_host(first.host).data, report_dir, doc["run"])
    print("\n".join([output.table(doc), *status_router.lines(doc["routers"])]), flush=True)
    path = output.write_json(doc, json_path)
    if json_path.parent == Path(report_dir):
        output.write_json(doc, json_path.parent / "status-latest.json")
    png, notice = output.write_png(doc, png_path)
    prom = inventory.get_host(first.host).data.get("kvceph_status_metrics")
    if prom:  # docs/monitoring.md: the bucket figures for the quota alerts
        logger.info(f"kvceph status: metrics {status_metrics.write(doc, prom)}")
    logger.info(f"kvceph status: report {path}" + (f", chart {png}" if png else ""))
    if notice:
        logger.warning(f"kvceph status: {notice}")
    if doc["partial"]:
        raise StatusPartial(f"kvceph status: partial: {'; '.join(doc['problems'])}")
    return doc
