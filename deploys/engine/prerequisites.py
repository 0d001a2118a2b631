"""PURE: whether each host can take kvceph, from facts read in preflight before any stage
(``facts/prerequisites.py``, ``facts.ceph.CephVersions``). One line per problem: the host,
what is missing, the fix; preflight stops the run on the first host's lines, before any
operation exists (so nothing is changed, ``--dry`` or not).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from deploys.engine import engine_lock

# vLLM's requires-python (its pyproject.toml) for the versions kvceph supports.
PYTHON_MIN = (3, 10)
# The CUDA of the torch each vLLM minor pins, and the oldest Linux driver that runs it (NVIDIA's
# CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions": 13.0 GA needs
# >= 580.65.06). vLLM 0.26.0 pins torch 2.11.0 (hw/h200/results/2026-12-01/env.txt), whose PyPI
# wheel depends on nvidia-*-cu13 (CUDA 13.0); vLLM 0.33.0 pins torch 2.14.0, PyPI's cu130 build
# too (hw/h200/results/2026-12-03-v033/env.txt: it ran on driver 580.159.04). A minor not listed
# is not checked (the plan says so): add its row when a host has run it.
DRIVER_MIN = {
    # vLLM 0.25.1 pins torch 2.11.0 too (its wheel's METADATA)
    "0.25": ("torch 2.11.0 (CUDA 13.0)", "580.65.06"),
    "0.26": ("torch 2.11.0 (CUDA 13.0)", "580.65.06"),
    "0.33": ("torch 2.14.0 (CUDA 13.0)", "580.65.06"),
}
# The Intel Gaudi software release (driver and firmware ship as one release number; hl-smi's
# driver_version reads e.g. "1.24.1-3bf9e81") each vllm-gaudi profile needs. vllm-gaudi releases
# in step with vLLM, so a row per vLLM minor of the Gaudi profile. Source: the vLLM Gaudi Plugin
# v0.26.0 release notes (github.com/vllm-project/vllm-gaudi/releases/tag/v0.26.0): "based on
# vLLM v0.26.0 and supports Intel Gaudi Software v1.24.1 with PyTorch 2.11". A newer release
# passes (the plugin's compatibility matrix: untested is not refused); a minor not listed is a
# plan note, as for NVIDIA.
GAUDI_DRIVER_MIN = {
    "0.26": ("vllm-gaudi 0.26.0 (Intel Gaudi software 1.24.1, PyTorch 2.11)", "1.24.1"),
}
# Free space the first install needs beside the venv: a vLLM venv with torch and the CUDA
# wheels, plus pip's unpacking. An estimate, not a measurement (no clean install was
# measured yet); an emulating engine (the lab engine) needs a fraction.
VENV_FREE_GIB = {"vllm": 12, "emulating": 1}
# A wheelhouse install: the venv takes this many bytes per wheel byte (wheels are zip files;
# torch's and the CUDA wheels unpack to ~2-3x). An estimate: no install's sizes were measured.
UNPACKED_PER_WHEEL_BYTE = 3


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text or ""))


def _real_vllm(packages) -> bool:
    return any(re.split(r"[=<>!~ \[]", p, maxsplit=1)[0].lower() == "vllm" for p in packages)


def inference_problems(
    me, fact: dict, venvs: Mapping | None = None, upload: Mapping[str, int] | None = None
) -> list[str]:
    """What keeps an inference host from running its engines (``[]`` when nothing).

    + me: the host's HostSettings
    + fact: its ``InferencePrerequisites``
    + venvs: its ``EngineVenvs`` (what the prune before the install frees)
    + upload: the controller's engine wheelhouse, file -> bytes (None: none)
    """
    e, host, out = me.engine, me.host, []
    py = _version(fact.get("python"))
    minor = ".".join(map(str, py[:2]))
    covered = engine_lock.pythons(e.lock_text)  # None: no lock, or one that does not say
    if not py:
        out.append(f"{host}: python3 is missing; fix: install python3 (>= 3.10, vLLM's minimum)")
    elif py[:2] < PYTHON_MIN:
        out.append(
            f"{host}: python3 is {fact['python']}, vLLM needs >= "
            f"{'.'.join(map(str, PYTHON_MIN))}; fix: install a newer python3"
        )
    elif covered and minor not in covered and not fact.get("venv"):
        # pip would fail mid-install (a locked version has no wheel for this minor, or needs a
        # newer one), after the first hosts made their venvs. A venv already there installed: quiet.
        out.append(
            f"{host}: python3 is {fact['python']}, but the engine lock {e.lock_source} covers "
            f"CPython {', '.join(covered)}; fix: make one of those the host's python3, or set "
            f"kvceph_engine_lock to a lock compiled for {minor} (python -m locks.compile "
            f"--python {minor} --packages ... --output FILE), or False"
        )
    out += _platform_problems(me, fact)
    if not fact.get("venv") and fact.get("ensurepip") is False:
        out.append(
            f"{host}: python3 cannot create the venv {e.venv} (no ensurepip); fix: apt-get "
            "install python3-venv (Debian/Ubuntu), or dnf install python3 (RHEL)"
        )
    disk = disk_problem(me, fact, venvs, upload)
    if disk:
        out.append(disk)
    out += _tool_problems(me, fact)
    return out


def install_need_kib(me, upload: Mapping[str, int] | None, venvs: Mapping | None) -> tuple:
    """(venv KiB, upload KiB) the next install of the profile's venv needs.

    + me: the host's HostSettings
    + upload: the controller's wheelhouse, file -> bytes (None: pip fetches from the index)
    + venvs: the host's ``EngineVenvs`` (the wheels it holds already are not sent again)
    """
    if upload:
        have = (venvs or {}).get("wheels", {})
        sent = sum(size for name, size in upload.items() if have.get(name) != size)
        return sum(upload.values()) * UNPACKED_PER_WHEEL_BYTE >> 10, sent >> 10
    need = VENV_FREE_GIB["vllm" if _real_vllm(me.engine.profile.packages) else "emulating"]
    return need << 20, 0


def disk_problem(me, fact: dict, venvs: Mapping | None, upload: Mapping[str, int] | None):
    """One line when the next install does not fit the free space after kvceph's prune before
    the install (``engine_lock.prune_plan``), else None; a venv already there needs nothing.

    + me: the host's HostSettings
    + fact: its ``InferencePrerequisites`` (``disk_free_kib`` under the venv)
    + venvs: its ``EngineVenvs`` (None: not read; the prune then frees nothing)
    + upload: the controller's wheelhouse, file -> bytes (None: no wheelhouse)

    The venv and the wheelhouse are counted on the venv's filesystem.
    """
    e, free = me.engine, fact.get("disk_free_kib")
    if fact.get("venv") or free is None:
        return None
    venv_kib, upload_kib = install_need_kib(me, upload, venvs)
    freed = 0
    if venvs and e.install:
        links = [e.venv_link(engine.unit) for engine in e.engines]
        before, _ = engine_lock.prune_plan(
            e.venv_base, venvs, e.venv, links, list(upload or ()), e.lock_text
        )
        # A venv kvceph made before the marker recorded no size: counted as freeing nothing.
        freed = sum(venvs.get("marks", {}).get(v) or 0 for v in before.venvs)
        freed += sum(venvs.get("wheels", {}).get(w, 0) for w in before.wheels) >> 10
    need, after = venv_kib + upload_kib, free + freed
    if after >= need:
        return None
    gib = 1 << 20
    return (
        f"{me.host}: {e.venv.rsplit('/', 1)[0] or '/'}: the engine's install needs "
        f"~{need / gib:.1f} GiB (venv ~{venv_kib / gib:.1f}, wheels to upload "
        f"{upload_kib / gib:.1f}) but {after / gib:.1f} GiB are free after kvceph's prune "
        f"(which frees {freed / gib:.1f}); fix: free space there (kvceph keeps the venv the "
        "engines run and one rollback venv), or set kvceph_venv on a larger disk"
    )


def _platform_problems(me, fact: dict) -> list[str]:
    """A lock compiled for another machine or an older glibc than the host's: its wheels do
    not install there (an aarch64 GH200 host against the x86_64 lock). Unknown: not checked."""
    e, machine = me.engine, fact.get("machine")
    target = engine_lock.platform(e.lock_text)
    if not target or not machine or fact.get("venv"):
        return []
    glibc = _version(fact.get("glibc"))
    if machine == target[0] and (not glibc or glibc[:2] >= target[1]):
        return []
    here = f"{machine}-manylinux_{glibc[0]}_{glibc[1]}" if len(glibc) > 1 else "<platform>"
    return [
        f"{me.host}: the host is {machine} with glibc {fact.get('glibc') or 'unknown'}, but the "
        f"engine lock {e.lock_source} holds wheels for {target[0]} with glibc >= "
        f"{'.'.join(map(str, target[1]))}; fix: set kvceph_engine_lock to a lock compiled for "
        f"this host (python -m locks.compile --platform {here} --packages ... --output FILE), "
        "or False"
    ]


def _tool_problems(me, fact: dict) -> list[str]:
    tool, host = fact.get("tool"), me.host
    if tool is None:  # kvceph_accelerator_check False: nothing run
        return []
    nvidia = me.engine.accelerator == "nvidia"
    name = "nvidia-smi" if nvidia else "hl-smi"
    if tool["rc"] == "missing":
        return [f"{host}: {name} is not installed; fix: install the accelerator driver"]
    if tool["rc"] != "0" or not tool["lines"]:
        said = " / ".join(tool["lines"][-2:]) or "no output"
        return [
            f"{host}: {name} failed (exit {tool['rc']}: {said}); fix: repair the accelerator "
            "driver (the engine cannot start without it)"
        ]
    out = _device_count_problems(me, len(tool["lines"]), "GPU(s)" if nvidia else "Gaudi device(s)")
    if nvidia:
        out += _nvidia_state_problems(me, fact.get("state"))
    row = (DRIVER_MIN if nvidia else GAUDI_DRIVER_MIN).get(me.engine.profile.vllm_minor)
    # The last CSV field of each device's line (nvidia-smi: name, memory, driver; hl-smi:
    # index, name, driver_version); hl-smi's carries a build hash ("1.24.1-3bf9e81").
    drivers = {line.rsplit(",", 1)[-1].strip() for line in tool["lines"]}
    if row:
        old = sorted(d for d in drivers if _version(d.split("-")[0]) < _version(row[1]))
        if old and nvidia:
            out.append(
                f"{host}: NVIDIA driver {', '.join(old)} is older than {row[1]}, which vLLM "
                f"{me.engine.profile.vllm_version}'s {row[0]} needs; fix: upgrade the driver"
            )
        elif old:
            out.append(
                f"{host}: Intel Gaudi driver {', '.join(old)} is older than {row[1]}, which "
                f"vLLM {me.engine.profile.vllm_version}'s {row[0]} needs; fix: upgrade the "
                f"Intel Gaudi software (driver and firmware) to {row[1]} or newer"
            )
    apps = fact.get("apps") or {"rc": "0", "lines": []}
    if apps["rc"] == "0":
        own = set(fact.get("own") or ())
        if nvidia:
            busy = [a for a in apps["lines"] if a.split(",", 1)[0].strip() not in own]
        else:
            rows = gaudi_processes(apps["lines"])
            busy = [f"AIP {a}: PID {p} {rest}".rstrip() for a, p, rest in rows if p not in own]
        if busy:
            # habanalabs' hl_device_open: "Can't open %s because another user is working on
            # it" (EBUSY) while another process holds the device's compute context.
            what = "GPUs" if nvidia else "Gaudi devices"
            why = (
                "vLLM takes kvceph_gpu_memory_utilization of each device"
                if nvidia
                else "the habanalabs driver gives a device to one process at a time"
            )
            out.append(
                f"{host}: the {what} already run other compute processes ({'; '.join(busy)}); "
                f"fix: stop them ({why})"
            )
    return out


# Fabric states of a GPU outside an NVSwitch system (the H100 recording's "N/A"; "Not
# Supported" where the driver knows the GPU has no fabric): nothing to wait for.
NO_FABRIC = {None, "N/A", "Not Supported"}
# The state lines' (section, key) -> the field they give.
_STATE_FIELDS = {
    ("mig", "Current"): "mig",
    ("fabric", "State"): "fabric_state",
    ("fabric", "Status"): "fabric_status",
}


def nvidia_gpu_states(lines: list[str]) -> list[dict]:
    """Per GPU, in nvidia-smi's index order: ``{"bus": "00000000:00:06.0", "mig": "Disabled",
    "fabric_state": "N/A", "fabric_status": "N/A"}`` (a key missing where the driver printed
    no such line).

    + lines: the fact's ``state`` lines (``facts.prerequisites.NVIDIA_STATE_KEEP``)
    """
    gpus: list[dict] = []
    for line in lines:
        section, _, rest = line.partition(" ")
        if section == "gpu":
            gpus.append({"bus": rest.strip()})
            continue
        key, _, value = rest.partition(":")
        field = _STATE_FIELDS.get((section, key.strip()))
        if gpus and field:
            gpus[-1][field] = value.strip()
    return gpus


def _nvidia_state_problems(me, state: dict | None) -> list[str]:
    """GPUs in MIG mode (unless ``kvceph_allow_mig``), and an NVSwitch system's GPUs whose
    fabric manager has not finished: one line each, naming the GPU indexes. Not checked where
    ``nvidia-smi -q`` did not answer (its failure is the tool's line) or was not read."""
    if not state or state.get("rc") != "0":
        return []
    gpus, out = nvidia_gpu_states(state["lines"]), []
    mig = [i for i, g in enumerate(gpus) if g.get("mig") == "Enabled"]
    if mig and not me.engine.allow_mig:
        out.append(
            f"{me.host}: GPU {', '.join(map(str, mig))} in MIG mode (nvidia-smi -q: MIG Mode "
            "Current Enabled), but kvceph gives each engine whole GPUs by index; fix: nvidia-smi "
            f"-i {mig[0]} -mig 0 and reset the GPU (nvidia-smi -i {mig[0]} -r), or set "
            "kvceph_allow_mig True where you configured the MIG instances for the engines"
        )
    waiting = [
        (i, g)
        for i, g in enumerate(gpus)
        if g.get("fabric_state") not in NO_FABRIC
        and (g["fabric_state"], g.get("fabric_status")) != ("Completed", "Success")
    ]
    if waiting:
        seen = sorted({(g["fabric_state"], g.get("fabric_status") or "none") for _, g in waiting})
        out.append(
            f"{me.host}: GPU {', '.join(str(i) for i, _ in waiting)}: NVLink fabric state "
            f"{' / '.join(f'{a}, status {b}' for a, b in seen)}, not Completed / Success (an "
            "NVSwitch system: its GPUs reach each other only once the fabric manager registered "
            "them, and NCCL fails or hangs before); fix: systemctl enable --now "
            "nvidia-fabricmanager (the driver's version), then wait for state Completed"
        )
    return out


def _device_count_problems(me, found: int, what: str) -> list[str]:
    """The host's devices (one line each in the tool's answer) against what its engines take:
    TP x engines, and every device an engine names by index.

    + found: the devices the tool listed
    + what: their name in the line (``GPU(s)``)
    """
    engines, tp = me.engine.engines, me.engine.tensor_parallel_size
    need = tp * len(engines)
    named = [int(d) for e in engines for d in (e.devices or ()) if str(d).isdigit()]
    if named:
        need = max(need, max(named) + 1)
    if found >= need:
        return []
    return [
        f"{me.host}: {found} {what} found, but {len(engines)} engine(s) x "
        f"kvceph_tensor_parallel_size {tp} (and the devices they name) need {need}; fix: lower "
        "kvceph_tensor_parallel_size or the engines (kvceph_engines), or check the host's "
        "devices (nvidia-smi -L / hl-smi)"
    ]


def gaudi_processes(lines: list[str]) -> list[tuple[str, str, str]]:
    """The rows of hl-smi's "Compute Processes" table that name a process:
    ``[(aip, pid, "type name usage")]``; an idle device's row (all "N/A") is none.

    + lines: plain ``hl-smi``'s output, one line each
    """
    out, rows = [], False
    for line in lines:
        if "Compute Processes" in line:
            rows = True
            continue
        words = line.strip().strip("|+").split()
        if rows and len(words) >= 2 and words[0].isdigit() and words[1].isdigit():
            out.append((words[0], words[1], " ".join(words[2:])))
    return out


def driver_note(me) -> str | None:
    """The plan line for a profile whose driver floor kvceph does not know."""
    minor = me.engine.profile.vllm_minor
    nvidia = me.engine.accelerator == "nvidia"
    if minor in (DRIVER_MIN if nvidia else GAUDI_DRIVER_MIN):
        return None
    what, table = ("NVIDIA", "DRIVER_MIN") if nvidia else ("Intel Gaudi", "GAUDI_DRIVER_MIN")
    return (
        f"kvceph: {me.host}: driver floor for vLLM {minor} unknown: the {what} driver is not "
        f"checked (deploys/engine/prerequisites.py {table})"
    )


def admin_problems(me, fact: dict, cluster: dict | None) -> list[str]:
    """What keeps the Ceph admin host from running kvceph's Ceph stages (``[]`` when nothing).

    + me: the host's HostSettings
    + fact: its ``AdminPrerequisites``
    + cluster: its ``CephVersions`` (None when the cluster did not answer: the Ceph stages say
      so themselves)
    """
    host, out = me.host, []
    for tool in ("ceph", "radosgw-admin"):
        if not fact.get(tool):
            out.append(
                f"{host}: {tool} is not installed; fix: install ceph-common"
                + (" and radosgw (radosgw-admin)" if tool == "radosgw-admin" else "")
                + " in the cluster's release"
            )
    if fact.get("boto3") is False:
        # deploys/remote/s3admin.py (the bucket, its policy, lifecycle and quota writes)
        out.append(
            f"{host}: python3 cannot import boto3, which kvceph's S3 admin helper runs on; "
            "fix: apt-get install python3-boto3 (or your distribution's package)"
        )
    client = fact.get("client")
    if client and cluster:
        majors = sorted({_version(v)[0] for v in cluster["versions"]})
        if _version(client)[0] not in majors:  # an upgrade half done has two
            out.append(
                f"{host}: the ceph client is {client} but the cluster runs "
                f"{', '.join(cluster['versions'])}: a client of another major release writes "
                "metadata the cluster may misread; fix: install the cluster's release of "
                "ceph-common and radosgw on the admin host"
            )
    return out
