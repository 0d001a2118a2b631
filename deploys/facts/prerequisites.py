"""What a host needs before kvceph installs anything: read once per host in preflight.

One fact per role, each one command (no stage runs before both answered): an inference host's
``python3``, whether it can make a venv, the disk under the venv, the accelerator tool's answer
and the processes on the devices; the Ceph admin host's ``ceph`` and ``radosgw-admin`` and the
client's version (the cluster's comes from ``facts.ceph.CephVersions``). The verdicts live in
``deploys/engine/prerequisites.py``, tested against recorded outputs.
"""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase, QuoteString, StringCommand

# The accelerator tool's queries: the same fields hw/h200 recorded on the H200
# (hw/h200/results/2026-12-01/env.txt), and the compute processes on any device.
NVIDIA_GPUS = "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader"
NVIDIA_APPS = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
# hl-smi as Intel documents it (docs.habana.ai, "System Management Interface Tool (hl-smi)"):
# `-Q` selects CSV fields (index, name, driver_version are among them), one line per AIP;
# hl-smi has no CSV query for processes, so the devices' users come from its summary table
# (plain `hl-smi`), whose "Compute Processes" section lists AIP, PID, type, process name and
# memory per device ("N/A" where idle). Intel: only root sees other users' PIDs there; kvceph's
# facts run as root, or through the inventory's sudo.
GAUDI_AIPS = "hl-smi -Q index,name,driver_version -f csv,noheader"
GAUDI_APPS = "hl-smi"
TOOLS = {"nvidia": (NVIDIA_GPUS, NVIDIA_APPS), "gaudi": (GAUDI_AIPS, GAUDI_APPS)}
TOOL_TIMEOUT = 30
# MIG mode and the NVLink fabric per GPU: `nvidia-smi -q`'s "GPU <bus id>" headers and the
# 8-space lines of its "MIG Mode" and "Fabric" sections (tests/fixtures/nvidia-smi/: the H100
# recording). `-q` rather than --query-gpu's mig.mode.current / fabric.state: a driver that
# lacks a field fails the whole query, while -q just has no such section. ~4 lines per GPU
# come back instead of ~260.
NVIDIA_STATE = "nvidia-smi -q"
NVIDIA_STATE_KEEP = (
    'awk \'/^GPU / {print "gpu " $2; next} /^    [^ ]/ {s = ""} '
    '/^    MIG Mode *$/ {s = "mig"} /^    Fabric *$/ {s = "fabric"} '
    's != "" && /^        (Current|State|Status) / {sub(/^ +/, ""); print s, $0}\''
)


def _tool_lines(query: str, tag: str, keep: str = "cat") -> str:
    """``<tag> <line>`` per output line of ``query`` (stderr included) that the filter
    ``keep`` passes, then ``<tag>_rc N``; ``<tag>_rc missing`` when the tool is not on PATH."""
    tool = query.split()[0]
    return (
        f"if command -v {tool} >/dev/null 2>&1; then "
        f"out=$(timeout {TOOL_TIMEOUT} {query} 2>&1); rc=$?; "
        f'printf "%s\\n" "$out" | {keep} | sed "s/^/{tag} /"; echo "{tag}_rc $rc"; '
        f'else echo "{tag}_rc missing"; fi'
    )


class InferencePrerequisites(FactBase):
    """
    An inference host's prerequisites, as lines the verdicts read
    (``deploys/engine/prerequisites``).

    + venv: the engine venv (``kvceph_venv``): present, or its filesystem's free space
    + accelerator: ``nvidia`` | ``gaudi`` | None (no tool run: ``kvceph_accelerator_check``
      False)
    + service_user: the engines' user (``kvceph_service_user``): its processes are kvceph's
      own engines, not "other compute processes" (a converged host runs them on the devices)

    Returns ``{"python": "3.11.2", "ensurepip": True, "venv": False, "disk_free_kib": 123,
    "machine": "x86_64", "glibc": "2.39",
    "tool": {"rc": "0", "lines": [...]}, "apps": {"rc": "0", "lines": []}, "own": ["4242"],
    "state": {"rc": "0", "lines": ["gpu 00000000:00:06.0", "mig Current : Disabled", ...]}}``;
    ``tool`` / ``apps`` / ``state`` (NVIDIA only: MIG mode and NVLink fabric per GPU) None where
    not run; ``own``: the service user's PIDs.
    """

    def command(self, venv: str, accelerator: str | None = None, service_user: str | None = None):
        parts = [
            "echo python $(python3 -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])'"
            " 2>/dev/null || echo none);",
            # Debian's python3 lacks ensurepip without python3-venv: `python3 -m venv` fails.
            "python3 -c 'import ensurepip, venv' >/dev/null 2>&1"
            " && echo ensurepip yes || echo ensurepip no;",
            StringCommand("test -x", QuoteString(f"{venv}/bin/python")),
            "&& echo venv yes || echo venv no;",
            f"d={shlex.quote(venv)};",
            'while [ ! -d "$d" ]; do d=$(dirname "$d"); done;',
            "echo disk_free_kib $(df -Pk \"$d\" | awk 'NR==2 {print $4}');",
            # The platform a lock's wheels must fit: "x86_64", "glibc 2.39" (none on musl).
            "echo machine $(uname -m); echo glibc $(getconf GNU_LIBC_VERSION 2>/dev/null);",
        ]
        gpus, apps = TOOLS.get(accelerator or "", (None, None))
        if gpus:
            parts.append(_tool_lines(gpus, "tool") + ";")
        if apps:
            parts.append(_tool_lines(apps, "apps") + ";")
        if accelerator == "nvidia":
            parts.append(_tool_lines(NVIDIA_STATE, "state", NVIDIA_STATE_KEEP) + ";")
        if gpus and service_user:
            # ps fails for a user that does not exist yet (a fresh host): no own process.
            parts += [
                "ps -o pid= -u",
                QuoteString(service_user),
                "2>/dev/null | sed 's/^ */own /';",
            ]
        parts.append("true")
        return StringCommand(*parts)

    def process(self, output):
        found: dict = {"python": None, "ensurepip": None, "venv": None, "disk_free_kib": None}
        found["machine"] = found["glibc"] = None
        found["tool"] = found["apps"] = found["state"] = None
        found["own"] = []
        for line in output:
            key, _, value = line.rstrip("\n").partition(" ")
            if key == "python":
                found["python"] = None if value == "none" else value.strip()
            elif key in ("ensurepip", "venv"):
                found[key] = value.strip() == "yes"
            elif key == "machine":
                found[key] = value.strip() or None
            elif key == "glibc":
                found[key] = value.split()[-1] if value.split() else None
            elif key == "disk_free_kib":
                found[key] = int(value) if value.strip().isdigit() else None
            elif key in ("tool", "apps", "state"):
                found[key] = found[key] or {"rc": None, "lines": []}
                if value.strip():
                    found[key]["lines"].append(value.strip())
            elif key == "own" and value.strip().isdigit():
                found["own"].append(value.strip())
            elif key in ("tool_rc", "apps_rc", "state_rc"):
                name = key[:-3]
                found[name] = found[name] or {"rc": None, "lines": []}
                found[name]["rc"] = value.strip()
        return found


class AdminPrerequisites(FactBase):
    """
    The Ceph admin host's tools: ``{"ceph": "/usr/bin/ceph", "radosgw-admin": None,
    "client": "16.2.15", "boto3": True}`` (paths None where missing; ``client``: ``ceph
    --version``; ``boto3``: whether python3 imports it, for kvceph's S3 admin helper; None
    where not told).
    """

    command = (
        "for t in ceph radosgw-admin; do echo which $t $(command -v $t); done; "
        "echo client $(timeout 30 ceph --version 2>/dev/null); "
        "python3 -c 'import boto3' >/dev/null 2>&1 && echo boto3 yes || echo boto3 no; true"
    )

    def process(self, output):
        found: dict = {"ceph": None, "radosgw-admin": None, "client": None, "boto3": None}
        for line in output:
            words = line.split()
            if words[:1] == ["boto3"] and len(words) == 2:
                found["boto3"] = words[1] == "yes"
            elif len(words) >= 3 and words[0] == "which" and words[1] in found:
                found[words[1]] = words[2]
            elif len(words) >= 4 and words[:3] == ["client", "ceph", "version"]:
                found["client"] = words[3]
        return found
