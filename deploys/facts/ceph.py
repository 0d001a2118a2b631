"""Facts about a Ceph cluster, read through the ``ceph`` CLI on the admin host.

Every fact takes ``connect_timeout`` and ``command_timeout`` so no read can hang a deploy.
"""

from __future__ import annotations

import json
import re

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys.cluster.ceph_cli import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    ceph,
    redacted,
)

# OSDMap pool types (osd_types.h: TYPE_REPLICATED = 1, TYPE_ERASURE = 3).
POOL_TYPES = {1: "replicated", 3: "erasure"}
_ORCH_FAILED = "kvceph-orch-status-failed"
_VERSION = re.compile(r"ceph version (\S+) \(\w+\) (\w+)")


def _json(output: list[str]):
    return json.loads("\n".join(output))


class _CephFact(FactBase):
    """A fact that is one bounded ``ceph`` call (``ceph_args``), None when it cannot be read."""

    ceph_args: tuple = ()
    ceph_json = True  # ``-f json``
    # When set, a failed call is output too, "<marker>=<exit status>" after its stderr: the
    # fact reports it instead of failing (a failed fact stops pyinfra with a prompt).
    failure_marker: str | None = None

    def command(
        self,
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    ):
        call = ceph(
            *self.ceph_args,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            json=self.ceph_json,
        )
        if self.failure_marker is None:
            return call
        return StringCommand(call, "2>&1", "||", "echo", f"{self.failure_marker}=$?")


class CephPools(_CephFact):
    """
    Pools by name, from ``ceph osd pool ls detail``.

    .. code:: python

        {
            "default.rgw.buckets.data": {
                "type": "replicated", "size": 2, "min_size": 1,
                "pg_num": 2048, "pg_num_target": 2048,
                "autoscale_mode": "off", "applications": ["rgw"],
            },
        }
    """

    ceph_args = ("osd", "pool", "ls", "detail")

    def process(self, output):
        pools = {}
        for p in _json(output):
            pools[p["pool_name"]] = {
                "type": POOL_TYPES.get(p["type"], str(p["type"])),
                "size": p["size"],
                "min_size": p["min_size"],
                "pg_num": p["pg_num"],
                # Where Ceph is heading: pg_num itself moves there in steps (splits/merges).
                "pg_num_target": p.get("pg_num_target", p["pg_num"]),
                "autoscale_mode": p.get("pg_autoscale_mode", "off"),
                "applications": sorted(p.get("application_metadata") or {}),
            }
        return pools


class CephOsdStat(_CephFact):
    """
    OSD counts from ``ceph osd stat``: ``{"num_osds": 3, "num_up_osds": 3, "num_in_osds": 3}``.
    """

    ceph_args = ("osd", "stat")

    def process(self, output):
        stat = _json(output)
        return {k: stat[k] for k in ("num_osds", "num_up_osds", "num_in_osds")}


class CephConfigDump(FactBase):
    """
    Where the monitors' config database sets some options (``ceph config dump``), by section.

    .. code:: python

        [{"section": "client.rgw.standard", "mask": "", "name": "rgw_dns_name",
          "value": "s3.kvlab"}]
    """

    # The dump holds every option of every daemon, passwords included (e.g.
    # rgw_keystone_admin_password): the admin host keeps only the options asked for, so
    # pyinfra never reads the others.
    _FILTER = (
        "import json,sys; w=set(sys.argv[1:]); "
        "print(json.dumps([e for e in json.load(sys.stdin) if e['name'] in w]))"
    )

    def command(
        self,
        options: tuple[str, ...],
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    ):
        dump = ceph(
            "config", "dump", connect_timeout=connect_timeout, command_timeout=command_timeout
        )
        return StringCommand(
            dump, "|", "python3", "-c", QuoteString(self._FILTER), *map(QuoteString, options)
        )

    def process(self, output):
        return [
            {k: e.get(k, "") for k in ("section", "mask", "name", "value")} for e in _json(output)
        ]


class CephOwnershipMarkers(_CephFact):
    """
    kvceph's ownership markers (``ceph config-key dump kvceph/owned/``,
    deploys/cluster/ownership.py): ``{"kvceph/owned/service/rgw.standard": "created"}``.
    """

    ceph_args = ("config-key", "dump", "kvceph/owned/")

    def process(self, output):
        return _json(output) if "".join(output).strip() else {}


class CephFsid(_CephFact):
    """
    The cluster's fsid (``ceph fsid -f json``), the identity ownership markers record.
    """

    ceph_args = ("fsid",)

    def process(self, output):
        return str(_json(output).get("fsid") or "") or None


class CephConfigValue(FactBase):
    """
    One option as a daemon sees it (``ceph config get <who> <option>``), as a string.
    """

    def command(
        self,
        who: str,
        option: str,
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    ):
        return ceph(
            "config",
            "get",
            who,
            option,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            json=False,
        )

    def process(self, output):
        return "\n".join(output).strip()


class CephVersions(_CephFact):
    """
    Versions the cluster's daemons run (``ceph versions``); ``oldest`` decides what specs
    the cluster accepts while an upgrade is half done.

    .. code:: python

        {"oldest": "16.2.15", "release": "pacific", "versions": ["16.2.15"]}
    """

    ceph_args = ("versions",)

    def process(self, output):
        found = {}
        for line in _json(output).get("overall", {}):
            m = _VERSION.match(line)
            if m:
                found[m.group(1)] = m.group(2)
        if not found:
            return None
        oldest = min(found, key=version_key)
        return {"oldest": oldest, "release": found[oldest], "versions": sorted(found)}


def version_key(version: str) -> tuple[int, ...]:
    """'19.2.1-222.el9cp' -> (19, 2, 1, 222): comparable, downstream build last."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split(".el")[0])[:4])


class CephOrchStatus(_CephFact):
    """
    Whether an orchestrator backend (cephadm, rook) answers ``ceph orch status``.

    A cluster without one is a normal state (packages, not cephadm), so the failure is data:
    ``{"available": False, "backend": None, "error": "Error ENOENT: No orchestrator ...",
    "timed_out": False}``. ``timed_out``: no answer before the command timeout (exit 124/137:
    no active mgr, or its orchestrator module stuck), a fault rather than a configuration.
    """

    ceph_args = ("orch", "status")
    failure_marker = _ORCH_FAILED

    def process(self, output):
        lines = [line for line in output if line.strip()]
        if lines and lines[-1].startswith(_ORCH_FAILED):
            rc = int(lines[-1].split("=", 1)[1] or 1)
            said = " ".join(lines[:-1]).strip()
            timed_out = rc in (124, 137)
            if timed_out:
                error = f"no answer, killed by timeout (exit {rc})" + (f": {said}" if said else "")
            else:
                error = said or f"exit status {rc}"
            return {"available": False, "backend": None, "error": error, "timed_out": timed_out}
        status = _json(lines)
        return {
            "available": bool(status.get("available")),
            "backend": status.get("backend"),
            "error": status.get("message") or None,
            "timed_out": False,
        }


class CephOrchHosts(_CephFact):
    """
    Orchestrator hosts and their labels (``ceph orch host ls``): ``{"ceph1": ["_admin", "rgw"]}``.
    """

    ceph_args = ("orch", "host", "ls")

    def process(self, output):
        return {h["hostname"]: sorted(h.get("labels") or []) for h in _json(output)}


class CephServiceSpec(FactBase):
    """
    The exported spec of one orchestrator service (``ceph orch ls --service_name <name>
    --export``), or None when the service does not exist.
    """

    def command(
        self,
        service_name: str,
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    ):
        # Secret values (an ingress's ssl_key) come back as their sha256 (ceph_cli.redacted).
        return redacted(
            ceph(
                "orch",
                "ls",
                "--service_name",
                service_name,
                "--export",
                connect_timeout=connect_timeout,
                command_timeout=command_timeout,
            )
        )

    def process(self, output):
        text = "\n".join(output).strip()
        # Pacific prints this sentence (exit 0) even with -f json when nothing matches.
        if not text or text == "No services reported":
            return None
        specs = json.loads(text)
        return specs[0] if specs else None


_CEPH_FAILED = "kvceph-ceph-failed"


class CephReachable(_CephFact):
    """
    Whether a mon answers ``ceph health`` within the connect timeout.

    Never fails itself (a failed fact stops pyinfra with a prompt and a traceback): returns
    ``{"reachable": False, "rc": 1, "error": "[errno 110] RADOS timed out (error connecting to
    the cluster)"}`` or ``{"reachable": True, "rc": 0, "error": None, "health": "HEALTH_OK"}``.
    """

    ceph_args = ("health",)
    ceph_json = False
    failure_marker = _CEPH_FAILED

    def process(self, output):
        lines = [line.strip() for line in output if line.strip()]
        if not lines or not lines[-1].startswith(_CEPH_FAILED):
            return {"reachable": True, "rc": 0, "error": None, "health": " ".join(lines[:1])}
        rc = int(lines[-1].split("=", 1)[1] or 1)
        said = lines[:-1]
        # ceph logs monclient lines before the one that says why; prefer that one.
        errno = [line for line in said if line.startswith("[errno")]
        error = (errno or said or [f"exit status {rc}"])[0]
        if rc in (124, 137):
            error = f"no answer, killed by timeout (exit {rc})" + (f": {error}" if said else "")
        return {"reachable": False, "rc": rc, "error": error}


_APPLY_RC = "kvceph-orch-apply-rc"
# How a mgr says it refused a spec. `orch apply` may still exit 0 (Ceph 20.2.4 printed
# "ServiceSpec: RGWSpec.__init__() got an unexpected keyword argument 'concentrator'", exit 0).
_REJECTED = re.compile(
    r"^(Error E[A-Z]+:|ServiceSpec:|SpecValidationError|ServiceSpecValidationError|"
    r"OrchestratorValidationError|Invalid |Traceback|Failed to )|unexpected keyword argument"
)


def orch_apply_refusal(lines: list[str], rc: int = 0) -> str | None:
    """The mgr's own words when ``ceph orch apply`` refused a spec, else None.

    The exit code alone is not trusted (0 with a refusal on 20.2.4), nor is a non-zero exit
    without words ignored (killed by timeout, no mgr).
    """
    said = [line.strip() for line in lines if line.strip()]
    for line in said:
        if _REJECTED.search(line):
            return line
    if rc:
        return (said[-1] if said else "no output") + f" (exit {rc})"
    return None


class CephSpecProbe(FactBase):
    """
    Whether the orchestrator accepts a spec: ``ceph orch apply -i - --dry-run`` (nothing is
    stored or deployed; the mgr parses and validates the spec as for a real apply).

    The answer, not the Ceph version, decides which RGW spec kvceph applies:
    ``{"accepted": False, "rc": 0, "message": "ServiceSpec: RGWSpec.__init__() got an
    unexpected keyword argument 'concentrator'"}`` or ``{"accepted": True, "rc": 0,
    "message": None}``. The spec travels on stdin (it holds no secret).
    """

    def command(
        self,
        spec: str,
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    ):
        return StringCommand(
            "printf",
            "%s",
            QuoteString(spec),
            "|",
            ceph(
                "orch",
                "apply",
                "-i",
                "-",
                "--dry-run",
                connect_timeout=connect_timeout,
                command_timeout=command_timeout,
                json=False,
            ),
            "2>&1;",
            "echo",
            f"{_APPLY_RC}=$?",
        )

    def process(self, output):
        lines = list(output)
        rc = 1
        if lines and lines[-1].startswith(_APPLY_RC + "="):
            rc = int(lines.pop().split("=", 1)[1] or 1)
        refusal = orch_apply_refusal(lines, rc)
        return {"accepted": refusal is None, "rc": rc, "message": refusal}
