"""deploys/engine/prerequisites.py against recorded outputs: the H200's nvidia-smi, `ceph versions`
of real clusters, the fact's own command on this machine with a stand-in accelerator tool; and
hl-smi's outputs from vendor docs, not a recording (tests/fixtures/hl-smi/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from deploys import settings as s
from deploys.engine import engine_lock, versions
from deploys.engine import prerequisites as p
from deploys.facts import ceph
from deploys.facts.prerequisites import AdminPrerequisites, InferencePrerequisites

ROOT = Path(__file__).resolve().parents[2]
# hw/h200/results/2026-12-01/env.txt: `nvidia-smi --query-gpu=name,memory.total,driver_version
# --format=csv,noheader` on the H200 that ran vLLM 0.26.0 (torch 2.11.0).
H200 = "NVIDIA H200, 143771 MiB, 580.159.04"
# What nvidia-smi prints (exit 9) where the driver is not loaded.
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running."
)


def host(accelerator="nvidia", vllm="0.26.0", **data):
    profile = {"vllm_version": vllm, "packages": [f"vllm=={vllm}", "lmcache==0.5.6"]}
    # TP 1: the recorded H200 is one GPU (the device-count check reads its one line)
    data = {
        "kvceph_s3_endpoint_ip": "10.0.0.5",
        "kvceph_engine_profile": profile,
        "kvceph_tensor_parallel_size": 1,
        **data,
    }
    if accelerator == "nvidia" and versions.kv_load_defect(vllm, "0.5.6"):
        # what these tests check is the host's prerequisites, not the pair's known defect
        data.setdefault("kvceph_accept_kv_load_defect", True)
    group = {"nvidia": "gpu", "gaudi": "gaudi"}[accelerator]
    return s.load(data, f"{group}1", (group,))


def fact(**over):
    base = {
        "python": "3.12.3",
        "ensurepip": True,
        "venv": False,
        "disk_free_kib": 60 << 20,
        "tool": {"rc": "0", "lines": [H200]},
        "apps": {"rc": "0", "lines": []},
    }
    return {**base, **over}


def test_the_h200_as_recorded_passes():
    assert p.inference_problems(host(), fact()) == []
    assert p.driver_note(host()) is None


def test_kvceph_own_engines_on_the_gpus_are_not_other_processes():
    # A converged host runs its engines on the GPUs: the service user's PIDs are kvceph's own.
    apps = {"rc": "0", "lines": ["4242, /opt/kvceph/venv/bin/python3, 81920 MiB"]}
    assert p.inference_problems(host(), fact(apps=apps, own=["4242", "4250"])) == []
    (line,) = p.inference_problems(host(), fact(apps=apps, own=["4250"]))
    assert "already run other compute processes (4242," in line


def test_each_missing_piece_is_one_line_naming_host_and_fix():
    me = host()
    cases = {
        "(no ensurepip); fix: apt-get install python3-venv": fact(ensurepip=False),
        "python3 is 3.9.2, vLLM needs >= 3.10": fact(python="3.9.2"),
        "python3 is missing": fact(python=None),
        "the engine's install needs ~12.0 GiB (venv ~12.0, wheels to upload 0.0) but 5.0 GiB "
        "are free after kvceph's prune (which frees 0.0)": fact(disk_free_kib=5 << 20),
        "nvidia-smi failed (exit 9: " + NO_DRIVER: fact(tool={"rc": "9", "lines": [NO_DRIVER]}),
        "nvidia-smi is not installed": fact(tool={"rc": "missing", "lines": []}),
        "NVIDIA driver 570.133.20 is older than 580.65.06, which vLLM 0.26.0's torch 2.11.0 "
        "(CUDA 13.0) needs": fact(
            tool={"rc": "0", "lines": [H200.replace("580.159.04", "570.133.20")]}
        ),
        "the GPUs already run other compute processes (4242, /usr/bin/python3, 81920 MiB)": fact(
            apps={"rc": "0", "lines": ["4242, /usr/bin/python3, 81920 MiB"]}
        ),
    }
    for expected, answer in cases.items():
        lines = p.inference_problems(me, answer)
        assert len(lines) == 1 and lines[0].startswith("gpu1: ") and expected in lines[0], lines
        assert "; fix: " in lines[0]


def test_what_needs_no_check_is_not_checked(monkeypatch):
    # A venv already there needs neither ensurepip nor the disk for a first install.
    assert p.inference_problems(host(), fact(venv=True, ensurepip=False, disk_free_kib=1)) == []
    # kvceph_accelerator_check False: the tool was not run.
    assert p.inference_problems(host(), fact(tool=None, apps=None)) == []
    # A vLLM minor without a driver row (every supported one has its row now): a plan note,
    # never a refusal.
    monkeypatch.setattr(p, "DRIVER_MIN", {"0.26": p.DRIVER_MIN["0.26"]})
    old = H200.replace("580.159.04", "470.01")
    me = host(vllm="0.33.0")
    assert p.inference_problems(me, fact(tool={"rc": "0", "lines": [old]})) == []
    assert "driver floor for vLLM 0.33 unknown" in p.driver_note(me)


def test_the_nvidia_default_vllm_0_25_has_its_driver_row():
    # hw/h200/results/2026-12-04-v025/env.txt: vLLM 0.25.1 (torch 2.11.0, cu130) ran on this H200.
    me = host(vllm="0.25.1")
    assert p.inference_problems(me, fact()) == [] and p.driver_note(me) is None
    old = H200.replace("580.159.04", "570.133.20")
    (line,) = p.inference_problems(me, fact(tool={"rc": "0", "lines": [old]}))
    assert "older than 580.65.06, which vLLM 0.25.1's torch 2.11.0 (CUDA 13.0) needs" in line


def test_vllm_0_33_has_its_driver_row():
    # hw/h200/results/2026-12-03-v033/env.txt: vLLM 0.33.0 (torch 2.14.0, cu130) ran on this H200.
    me = host(vllm="0.33.0")
    assert p.inference_problems(me, fact()) == [] and p.driver_note(me) is None
    old = H200.replace("580.159.04", "570.133.20")
    (line,) = p.inference_problems(me, fact(tool={"rc": "0", "lines": [old]}))
    assert "older than 580.65.06, which vLLM 0.33.0's torch 2.14.0 (CUDA 13.0) needs" in line


def _cluster(name: str) -> dict:
    case = json.loads((ROOT / f"tests/facts/ceph.CephVersions/{name}.json").read_text())
    return ceph.CephVersions().process(case["output"])


@pytest.mark.parametrize(
    ("client", "cluster", "ok"),
    [
        ("16.2.15", "pacific", True),
        ("18.2.4", "reef_18_2_4", True),
        ("19.2.3", "squid_19_2_3", True),
        ("20.2.4", "tentacle_20_2_4", True),
        ("18.2.4", "squid_19_2_3", False),
        ("16.2.15", "tentacle_20_2_4", False),  # a Pacific radosgw-admin on a Tentacle cluster
        ("20.2.4", "pacific", False),
    ],
)
def test_admin_client_major_must_be_the_clusters(client, cluster, ok):
    me = host()  # any host's settings carry the name
    tools = {"ceph": "/usr/bin/ceph", "radosgw-admin": "/usr/bin/radosgw-admin", "client": client}
    lines = p.admin_problems(me, tools, _cluster(cluster))
    assert (lines == []) is ok, lines
    if not ok:
        assert f"the ceph client is {client} but the cluster runs" in lines[0]


def test_admin_tools_missing():
    lines = p.admin_problems(host(), {"ceph": "/usr/bin/ceph", "radosgw-admin": None}, None)
    assert lines == [
        "gpu1: radosgw-admin is not installed; fix: install ceph-common and radosgw "
        "(radosgw-admin) in the cluster's release"
    ]


def _run(command: str, path: str | None = None) -> list[str]:
    env = dict(os.environ, PATH=f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"])
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60
    )
    return done.stdout.splitlines()


def _tool(tmp_path: Path, body: str, name: str = "nvidia-smi") -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(bin_dir)


def test_the_fact_command_reads_this_machine_and_a_stand_in_tool(tmp_path):
    f = InferencePrerequisites()
    cmd = f.command(str(tmp_path / "venv"), "nvidia").get_raw_value()
    # The recorded H200 answer, no compute process.
    path = _tool(tmp_path, f'case "$1" in --query-gpu*) echo "{H200}";; esac\n')
    got = f.process(_run(cmd, path))
    assert got["python"] and got["venv"] is False and got["disk_free_kib"] > 0
    assert got["machine"] == os.uname().machine and got["glibc"].count(".") == 1
    assert got["tool"] == {"rc": "0", "lines": [H200]} and got["apps"] == {"rc": "0", "lines": []}
    # The driver not loaded: the tool's own words and exit status.
    path = _tool(tmp_path, f'echo "{NO_DRIVER}"\nexit 9\n')
    got = f.process(_run(cmd, path))
    assert got["tool"] == {"rc": "9", "lines": [NO_DRIVER]}
    assert "nvidia-smi failed (exit 9" in p.inference_problems(host(), got)[-1]
    # No accelerator check: no tool runs.
    got = f.process(_run(f.command(str(tmp_path), None).get_raw_value()))
    assert got["tool"] is None and got["venv"] is False


def test_admin_fact_reads_ceph_version_lines():
    out = [
        "which ceph /usr/bin/ceph",
        "which radosgw-admin",
        "client ceph version 16.2.15 (618f440892089921c3e944a991122ddc44e60516) pacific (stable)",
    ]
    assert AdminPrerequisites().process(out) == {
        "ceph": "/usr/bin/ceph",
        "radosgw-admin": None,
        "client": "16.2.15",
        "boto3": None,
    }
    assert AdminPrerequisites().process(["boto3 no"])["boto3"] is False


def test_the_admin_host_needs_boto3_for_the_s3_admin_helper():
    tools = {"ceph": "/usr/bin/ceph", "radosgw-admin": "/usr/bin/radosgw-admin"}
    assert p.admin_problems(host(), {**tools, "boto3": True}, None) == []
    (line,) = p.admin_problems(host(), {**tools, "boto3": False}, None)
    assert line == (
        "gpu1: python3 cannot import boto3, which kvceph's S3 admin helper runs on; fix: "
        "apt-get install python3-boto3 (or your distribution's package)"
    )


# python3's version as the fact reads it (`python 3.x.y`) on the distributions' hosts: Ubuntu
# 22.04's python3 3.10.12, Debian 12's 3.11.2, Ubuntu 24.04's 3.12.3 (the H200's), Debian 13's
# 3.13.5, Fedora 43's 3.14.0; the rest of the answer is the H200's.
# `uname -m` and `getconf GNU_LIBC_VERSION` on the H200 host (Ubuntu 24.04.3, 2026-12-04).
H200_PLATFORM = ["machine x86_64", "glibc glibc 2.39"]


def _answer(python: str, venv: str = "no", platform=H200_PLATFORM) -> dict:
    lines = [f"python {python}", "ensurepip yes", f"venv {venv}", "disk_free_kib 66060288"]
    tool = [f"tool {H200}", "tool_rc 0", "apps_rc 0"]
    return InferencePrerequisites().process([*lines, *platform, *tool])


def builtin(**data):
    """An NVIDIA host of the built-in profile: it installs from the shipped lock."""
    base = {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_tensor_parallel_size": 1}  # one GPU
    return s.load({**base, **data}, "gpu1", ("gpu",))


@pytest.mark.parametrize(
    ("python", "ok"),
    [("3.10.12", False), ("3.11.2", True), ("3.12.3", True), ("3.13.5", True), ("3.14.0", False)],
)
def test_the_hosts_python_must_be_a_minor_the_shipped_lock_covers(python, ok):
    me = builtin()
    covered = engine_lock.pythons(me.engine.lock_text)
    assert covered == ("3.11", "3.12", "3.13")
    minor = python.rsplit(".", 1)[0]
    lines = p.inference_problems(me, _answer(python))
    assert lines == ([] if ok else [
        f"gpu1: python3 is {python}, but the engine lock locks/nvidia.txt covers CPython 3.11, "
        f"3.12, 3.13; fix: make one of those the host's python3, or set kvceph_engine_lock to a "
        f"lock compiled for {minor} (python -m locks.compile --python {minor} --packages ... "
        "--output FILE), or False"
    ])  # fmt: skip


def test_the_python_check_is_quiet_where_nothing_installs_from_a_covering_lock():
    # The profile's venv already there (installed before): nothing to install.
    assert p.inference_problems(builtin(), _answer("3.10.12", venv="yes")) == []
    # The opt-out, another profile (pip resolves on the host), a lock that does not say.
    assert p.inference_problems(builtin(kvceph_engine_lock=False), _answer("3.10.12")) == []
    assert p.inference_problems(host(vllm="0.26.0"), _answer("3.10.12")) == []


def test_preflight_stops_on_the_lock_python_before_any_host_is_touched():
    from deploys import preflight

    hosts = {"gpu1": builtin()}
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.check_prerequisites(hosts, lambda name, fact, **kw: _answer("3.10.12"))
    line = str(caught.value)
    assert line.startswith("kvceph: gpu1: python3 is 3.10.12, but the engine lock")
    assert line.endswith("or False (nothing was changed)") and "\n" not in line


@pytest.mark.parametrize(
    ("platform", "line"),
    [
        (H200_PLATFORM, None),
        (["machine x86_64", "glibc glibc 2.31"], None),  # Ubuntu 20.04: the oldest it fits
        (
            ["machine aarch64", "glibc glibc 2.39"],  # a GH200 host
            "gpu1: the host is aarch64 with glibc 2.39, but the engine lock locks/nvidia.txt "
            "holds wheels for x86_64 with glibc >= 2.31; fix: set kvceph_engine_lock to a lock "
            "compiled for this host (python -m locks.compile --platform aarch64-manylinux_2_39 "
            "--packages ... --output FILE), or False",
        ),
        (["machine x86_64", "glibc glibc 2.28"], "x86_64 with glibc 2.28, but"),  # RHEL 8
        (["machine x86_64", "glibc"], None),  # musl: getconf has no answer, not checked
        ([], None),  # a fact without the lines (older recordings): not checked
    ],
)
def test_the_hosts_platform_must_fit_the_shipped_locks_wheels(platform, line):
    lines = p.inference_problems(builtin(), _answer("3.12.3", platform=platform))
    if line is None:
        assert lines == []
    else:
        assert len(lines) == 1 and line in lines[0] and lines[0].startswith("gpu1: ")
    # The venv already there, or no lock that says: quiet.
    assert p.inference_problems(builtin(), _answer("3.12.3", "yes", platform)) == []
    assert p.inference_problems(host(vllm="0.26.0"), _answer("3.12.3", platform=platform)) == []


# --- Intel Gaudi: hl-smi from vendor docs, not a recording (tests/fixtures/hl-smi/README.md) ---
HL_SMI = ROOT / "tests/fixtures/hl-smi"
IDLE = (HL_SMI / "idle-2x-1.17.1.txt").read_text().splitlines()
BUSY = (HL_SMI / "busy-8x-aip7.txt").read_text().splitlines()
DOCUMENTED = "1.17.1-78932ae"  # the table's "Driver Version:" in Intel's page


def aips(driver: str, n: int = 2) -> list[str]:
    """`hl-smi -Q index,name,driver_version -f csv,noheader` per the documented fields, with the
    values of Intel's table (README.md: no page prints this exact query)."""
    return [f"{i}, HL-225, {driver}" for i in range(n)]


def gaudi_fact(driver: str = "1.24.1-78932ae", table=IDLE, **over) -> dict:
    answer = {"tool": {"rc": "0", "lines": aips(driver)}, "apps": {"rc": "0", "lines": table}}
    return fact(**{**answer, **over})


def test_gaudi_at_the_profiles_release_or_newer_with_idle_devices_passes():
    """vLLM 0.26.0's vllm-gaudi 0.26.0 supports Intel Gaudi software 1.24.1: 1.24.1 and a newer
    release pass on idle devices (the documented table, every row N/A)."""
    me = host("gaudi")
    for driver in ("1.24.1-78932ae", "1.24.2-0a1b2c3", "1.25.0-78932ae", "2.0.0-78932ae"):
        assert p.inference_problems(me, gaudi_fact(driver)) == [], driver
    assert p.driver_note(me) is None
    assert p.gaudi_processes(IDLE) == []


def test_gaudi_refusals_are_one_exact_line_each():
    me = host("gaudi")
    assert p.inference_problems(me, gaudi_fact(DOCUMENTED)) == [
        "gaudi1: Intel Gaudi driver 1.17.1-78932ae is older than 1.24.1, which vLLM 0.26.0's "
        "vllm-gaudi 0.26.0 (Intel Gaudi software 1.24.1, PyTorch 2.11) needs; fix: upgrade the "
        "Intel Gaudi software (driver and firmware) to 1.24.1 or newer"
    ]
    # One release below, hash aside: the version is what is compared, not the build hash.
    (line,) = p.inference_problems(me, gaudi_fact("1.24.0-ffffff9"))
    assert line.startswith("gaudi1: Intel Gaudi driver 1.24.0-ffffff9 is older than 1.24.1")
    assert p.inference_problems(me, gaudi_fact(table=BUSY)) == [
        "gaudi1: the Gaudi devices already run other compute processes (AIP 7: PID 107684 C "
        "ray::_RayTrainW 16770MiB); fix: stop them (the habanalabs driver gives a device to one "
        "process at a time)"
    ]
    assert p.inference_problems(me, gaudi_fact(tool={"rc": "missing", "lines": []})) == [
        "gaudi1: hl-smi is not installed; fix: install the accelerator driver"
    ]


def test_gaudi_own_engine_unknown_floor_and_no_check_are_not_refused(monkeypatch):
    me = host("gaudi")
    # kvceph's own engine (the service user's PID) on AIP 7 of a converged host.
    assert p.inference_problems(me, gaudi_fact(table=BUSY, own=["107684"])) == []
    # A process table hl-smi failed to print: the driver floor still holds, no busy verdict.
    failed = gaudi_fact(apps={"rc": "1", "lines": ["hl-smi: error"]})
    assert p.inference_problems(me, failed) == []
    # kvceph_accelerator_check False (the lab's Gaudi host): nothing run, nothing refused.
    assert p.inference_problems(me, fact(tool=None, apps=None)) == []
    # A vLLM minor without a Gaudi row: a plan note, never a refusal.
    monkeypatch.setattr(p, "GAUDI_DRIVER_MIN", {})
    assert p.inference_problems(me, gaudi_fact(DOCUMENTED)) == []
    assert p.driver_note(me) == (
        "kvceph: gaudi1: driver floor for vLLM 0.26 unknown: the Intel Gaudi driver is not "
        "checked (deploys/engine/prerequisites.py GAUDI_DRIVER_MIN)"
    )


def test_the_fact_command_runs_hl_smi_as_documented(tmp_path):
    f = InferencePrerequisites()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    cmd = f.command(str(tmp_path / "venv"), "gaudi", service_user=user).get_raw_value()
    assert "hl-smi -Q index,name,driver_version -f csv,noheader" in cmd
    csv = "\\n".join(aips("1.24.1-78932ae"))
    table = str(HL_SMI / "busy-8x-aip7.txt")
    path = _tool(
        tmp_path, f'case "$1" in -Q) printf "{csv}\\n";; *) cat {table};; esac\n', "hl-smi"
    )
    got = f.process(_run(cmd, path))
    assert got["tool"] == {"rc": "0", "lines": aips("1.24.1-78932ae")}
    assert got["apps"]["rc"] == "0" and p.gaudi_processes(got["apps"]["lines"]) == [
        ("7", "107684", "C ray::_RayTrainW 16770MiB")
    ]
    assert got["own"] and all(pid.isdigit() for pid in got["own"])  # this user runs the shell
    (line,) = p.inference_problems(host("gaudi"), got)
    assert "(AIP 7: PID 107684 C ray::_RayTrainW 16770MiB)" in line
    # A service user not created yet (a fresh host): no own process, no error.
    cmd = f.command(str(tmp_path), "gaudi", service_user="kvceph-no-such-user").get_raw_value()
    assert f.process(_run(cmd, path))["own"] == []


def test_fewer_devices_than_tp_times_engines_are_refused():
    # the recorded H200 (one GPU) under the default TP 2
    (line,) = p.inference_problems(host(kvceph_tensor_parallel_size=2), fact())
    assert line.startswith(
        "gpu1: 1 GPU(s) found, but 1 engine(s) x kvceph_tensor_parallel_size 2 (and the "
        "devices they name) need 2; fix: lower kvceph_tensor_parallel_size"
    )
    eight = fact(tool={"rc": "0", "lines": [H200] * 8})
    assert p.inference_problems(host(kvceph_tensor_parallel_size=2), eight) == []


def _recorded_venvs():
    """The EngineVenvs answer recorded on a host (tests/facts/engine.EngineVenvs)."""
    path = Path(__file__).resolve().parents[1] / "facts/engine.EngineVenvs/marked_and_locked.json"
    return json.loads(path.read_text())["fact"]


def test_the_disk_check_counts_venv_and_wheels_against_free_space_after_the_prune():
    """A wheelhouse install needs its wheels (those the host lacks) and ~3x them unpacked; the
    prune before the install frees what no rollback needs (its marker says how much)."""
    gib = 1 << 30
    me = host(kvceph_accelerator_check=False)
    upload = {"vllm-0.26.0-py3-none-any.whl": 2 * gib, "lmcache-0.5.6-py3-none-any.whl": gib}
    assert p.install_need_kib(me, upload, None) == (9 << 20, 3 << 20)
    held = {"wheels": {"lmcache-0.5.6-py3-none-any.whl": gib}}
    assert p.install_need_kib(me, upload, held) == (9 << 20, 2 << 20)  # not sent again
    assert p.install_need_kib(me, None, None) == (12 << 20, 0)  # from the index: the estimate
    (line,) = p.inference_problems(me, fact(disk_free_kib=10 << 20, tool=None), None, upload)
    assert line == (
        "gpu1: /opt/kvceph: the engine's install needs ~12.0 GiB (venv ~9.0, wheels to upload "
        "3.0) but 10.0 GiB are free after kvceph's prune (which frees 0.0); fix: free space "
        "there (kvceph keeps the venv the engines run and one rollback venv), or set "
        "kvceph_venv on a larger disk"
    )
    # Three old venvs of kvceph's beside the one the engines run: the oldest two go first.
    runs = "/opt/kvceph/venv-" + "a" * 12
    venvs = {"venvs": {}, "marks": {}, "links": {me.engine.venv_link("vllm.service"): runs}}
    for i, digest in enumerate("abcd"):
        path = f"/opt/kvceph/venv-{digest * 12}"
        venvs["venvs"][path] = 400 - i
        venvs["marks"][path] = 1 << 20  # 1 GiB each, as the marker records
    assert p.inference_problems(me, fact(disk_free_kib=10 << 20, tool=None), venvs, upload) == []
    assert p.disk_problem(me, fact(disk_free_kib=9 << 20), venvs, upload)  # 9 + 2 < 12
    # The venv is there: nothing to install.
    assert p.disk_problem(me, fact(venv=True, disk_free_kib=0), venvs, upload) is None


def test_the_disk_check_reads_the_recorded_venvs_fact():
    """The recorded answer: a marked venv the engines run, one with a lock record only."""
    me = host(kvceph_accelerator_check=False)
    venvs = _recorded_venvs()
    assert p.disk_problem(me, fact(disk_free_kib=12 << 20), venvs, None) is None
    assert "which frees 0.0" in p.disk_problem(me, fact(disk_free_kib=1 << 20), venvs, None)


# `nvidia-smi -q` on an H100 (tests/fixtures/nvidia-smi/README.md): MIG off, no NVLink fabric.
H100_Q = (ROOT / "tests/fixtures/nvidia-smi/h100-q.txt").read_text()
H100 = "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04"  # its --query-gpu line, as the fact asks


def _states(tmp_path: Path, text: str) -> dict:
    """The fact's command on this machine with a stand-in nvidia-smi answering ``-q`` with
    ``text`` (the recording, or it with values changed)."""
    recorded = tmp_path / "q.txt"
    recorded.write_text(text)
    path = _tool(
        tmp_path, f'case "$1" in --query-gpu*) echo "{H100}";; -q) cat {recorded};; esac\n'
    )
    f = InferencePrerequisites()
    return f.process(_run(f.command(str(tmp_path / "venv"), "nvidia").get_raw_value(), path))


def _set(text: str, section: str, key: str, value: str) -> str:
    """The recording with one line of a section changed (no GPU here has MIG or a fabric)."""
    head = f"    {section}\n"
    start = text.index(head)
    line = next(ln for ln in text[start:].splitlines() if ln.strip().startswith(key))
    return text[:start] + text[start:].replace(line, line.split(":")[0] + ": " + value, 1)


def _two_gpus(text: str) -> str:
    """The recording's GPU twice (a second bus id): what an 8-GPU host's -q repeats per GPU."""
    start, end = text.index("GPU 00000000:00:06.0"), text.index("\nindex, name")
    gpu = text[start:end]
    return text[:end] + "\n" + gpu.replace("00000000:00:06.0", "00000000:00:07.0") + text[end:]


def test_the_h100_recording_reads_mig_off_and_no_fabric_and_passes(tmp_path):
    got = _states(tmp_path, H100_Q)
    assert got["state"]["rc"] == "0" and len(got["state"]["lines"]) == 4  # of ~260
    assert p.nvidia_gpu_states(got["state"]["lines"]) == [
        {
            "bus": "00000000:00:06.0",
            "mig": "Disabled",
            "fabric_state": "N/A",
            "fabric_status": "N/A",
        }
    ]
    assert p.inference_problems(host(), got) == []


def test_a_gpu_in_mig_mode_is_refused_unless_configured(tmp_path):
    mig = _set(_two_gpus(H100_Q), "MIG Mode", "Current", "Enabled")  # the first GPU only
    got = _states(tmp_path, mig)
    assert [g["mig"] for g in p.nvidia_gpu_states(got["state"]["lines"])] == ["Enabled", "Disabled"]
    (line,) = p.inference_problems(host(), got)
    assert line == (
        "gpu1: GPU 0 in MIG mode (nvidia-smi -q: MIG Mode Current Enabled), but kvceph gives "
        "each engine whole GPUs by index; fix: nvidia-smi -i 0 -mig 0 and reset the GPU "
        "(nvidia-smi -i 0 -r), or set kvceph_allow_mig True where you configured the MIG "
        "instances for the engines"
    )
    assert p.inference_problems(host(kvceph_allow_mig=True), got) == []


@pytest.mark.parametrize(
    ("state", "status", "ok"),
    [
        ("Completed", "Success", True),
        ("In Progress", "N/A", False),  # the fabric manager still registering the GPUs
        ("Not Started", "N/A", False),  # nvidia-fabricmanager not running
        ("Completed", "Failure", False),
        ("Not Supported", "N/A", True),  # the driver knows of no fabric: not NVSwitch
    ],
)
def test_an_nvswitch_systems_gpus_need_the_fabric_manager_completed(tmp_path, state, status, ok):
    text = _set(_set(_two_gpus(H100_Q), "Fabric", "State", state), "Fabric", "Status", status)
    got = _states(tmp_path, text)
    lines = p.inference_problems(host(), got)
    if ok:
        assert lines == []
        return
    (line,) = lines
    assert line == (
        f"gpu1: GPU 0: NVLink fabric state {state}, status {status}, not Completed / Success "
        "(an NVSwitch system: its GPUs reach each other only once the fabric manager "
        "registered them, and NCCL fails or hangs before); fix: systemctl enable --now "
        "nvidia-fabricmanager (the driver's version), then wait for state Completed"
    )


def test_no_state_check_where_nvidia_smi_q_fails_or_was_not_read(tmp_path):
    path = _tool(tmp_path, f'case "$1" in --query-gpu*) echo "{H100}";; -q) exit 9;; esac\n')
    f = InferencePrerequisites()
    got = f.process(_run(f.command(str(tmp_path / "venv"), "nvidia").get_raw_value(), path))
    assert got["state"] == {"rc": "9", "lines": []}
    assert p.inference_problems(host(), got) == []
    assert p.inference_problems(host(), fact()) == []  # a fact without the lines
