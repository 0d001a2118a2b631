"""The local lab, started once per test session, and helpers that drive the real deploy.

Set KVCEPH_KEEP_LAB=1 to leave the lab running after the tests (to look around).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploys.settings import group_data

REPO = Path(__file__).resolve().parents[2]
# KVCEPH_LAB_INSTANCE=N: the Nth lab beside the others (lab/lab.sh): subnet 10.213.(7+N).0/24.
_INSTANCE = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
_NET = f"10.213.{7 + _INSTANCE}"
LAB_DIR = Path(os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{_INSTANCE or ''}"))
SECRETS = Path(os.environ.get("KVCEPH_SECRETS_FILE", LAB_DIR / "secrets.env"))
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
HOSTS = {
    "ceph1": f"{_NET}.11",
    "gpu1": f"{_NET}.21",
    "gpu2": f"{_NET}.22",
    "gaudi1": f"{_NET}.31",
}
INFERENCE = ("gpu1", "gpu2", "gaudi1")
# The lab's S3 path (group_data/lab.py): https by default, KVCEPH_LAB_S3_SCHEME=http for the
# plain variant.
S3_SCHEME = os.environ.get("KVCEPH_LAB_S3_SCHEME") or "https"
S3_PORT = {"https": 443, "http": 80}[S3_SCHEME]
# The lab serves its model from the mirror (group_data/lab.py): every host's `vllm serve`
# argument, and so the model field of every LMCache key, is the staged directory.
LAB_MODEL_REVISION = group_data.read(["lab"], keep=lambda k: k == "LAB_MODEL_REVISION")[
    "LAB_MODEL_REVISION"
]
MODEL_ARGUMENT = f"/var/lib/kvceph/models/Qwen/Qwen3-32B/{LAB_MODEL_REVISION}"


def _group_prefixes() -> dict[str, tuple[str, str]]:
    """Each lab cache group's (grant, namespace): what the bucket policy lets its user touch
    and the folder its engines write now (deploys/settings/namespace.py)."""
    from deploys import settings
    from deploys.settings import namespace

    spec = importlib.util.spec_from_file_location("_lab_inventory", REPO / "inventories/lab.py")
    inventory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inventory)
    out = {}
    for group, name in (("gpu", "gpu1"), ("gaudi", "gaudi1")):
        data = {**group_data.read(("all", group, "lab")), **dict(getattr(inventory, group))[name]}
        # files the lab makes at `up` (its CA, the ingress certificate): not needed to name
        # objects, and absent when pytest starts on a fresh machine (the cephadm session
        # builds its lab inside the session)
        for key in ("kvceph_s3_ca_bundle", "kvceph_rgw_ingress_ssl_pem"):
            data.pop(key, None)
        me = settings.load(data, name, (group, "lab"))
        out[group] = (namespace.object_prefix(me), namespace.prefix(me))
    return out


_PREFIXES = _group_prefixes()
#: group -> the prefix every object of its cache group starts with (its user's grant)
GROUP_PREFIX = {group: grant for group, (grant, _) in _PREFIXES.items()}
#: group -> the namespace folder its engines write in now
GROUP_NAMESPACE = {group: ns for group, (_, ns) in _PREFIXES.items()}
#: a GPU-group chunk's name: its namespace, then LMCache's own name of the chunk
GPU_KEY_PREFIX = GROUP_NAMESPACE["gpu"] + MODEL_ARGUMENT.replace("/", "_") + "@2@"
LAB_MODEL_DIR = LAB_DIR / "model"
# KVCEPH_LAB_CEPH=cephadm: the cephadm lab (Ceph 20.2.4; RGW behind cephadm's ingress VIP .100,
# bound to ceph1's lab address only). Otherwise the Pacific lab (haproxy on ceph1, all addresses).
# Like group_data/lab.py: the variable, else the mode the running lab recorded.
_RECORDED = LAB_DIR / "ceph-mode"
CEPHADM = (
    os.environ.get("KVCEPH_LAB_CEPH")
    or (_RECORDED.read_text().strip() if _RECORDED.exists() else "pacific")
) == "cephadm"
S3_HOST = f"{_NET}.100" if CEPHADM else f"{_NET}.11"
# The hosts cephadm places RGW and the ingress on (the inventory's rgw group): the cephadm lab
# has a second one, rgw2, which runs no engine (so it is not in HOSTS, the hosts a deploy
# changes); each is MASTER of one ingress VIP (.100 ceph1, .101 rgw2).
RGW_HOSTS = {"ceph1": f"{_NET}.11", **({"rgw2": f"{_NET}.12"} if CEPHADM else {})}
VIPS = {"ceph1": f"{_NET}.100", "rgw2": f"{_NET}.101"} if CEPHADM else {}
# Where verify.py and the tests' own S3 clients go (kvceph_verify_s3_endpoint).
S3_URL = f"{S3_SCHEME}://{S3_HOST}:{S3_PORT}"
# The tests' admin client: the Pacific lab's haproxy also serves plain http on :80; cephadm's
# ingress has one frontend, in the lab's scheme.
S3_ADMIN_URL = S3_URL if CEPHADM else f"http://{S3_HOST}:80"
# kvceph_s3_admin_endpoint of group_data/lab.py: where the S3 tier's admin writes go from ceph1
ADMIN_ENDPOINT = S3_URL if CEPHADM else f"{S3_SCHEME}://127.0.0.1:{S3_PORT}"
# The lab CA (lab/tls/), for clients of an https URL.
CA_BUNDLE = str(LAB_DIR / "tls" / "ca.pem")


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.integration)


# What a person needs to see why a lab test failed, printed with the failure (CI has no shell on
# the lab afterwards): each host's relevant journal tail and the last verify report.
JOURNALS = {
    "ceph1": "kvlab-ceph kvlab-rgw@gw1 kvlab-rgw@gw2 haproxy",
    **{host: "vllm" for host in INFERENCE},
}
# Where verify.py, probe.py and status.py write for this instance (group_data/lab.py: reports/
# for instance 0, reports/labN beside it).
_REPORT_DIR = "kvceph_verify_report_dir"
REPORTS = REPO / group_data.read(["lab"], keep=lambda k: k == _REPORT_DIR)[_REPORT_DIR]


def lab_diagnostics(lines: int = 40) -> str:
    """The tail of each lab host's journal for its kvceph units, and the newest verify report."""
    parts = []
    for host, units in JOURNALS.items():
        args = " ".join(f"-u {unit}" for unit in units.split())
        try:
            out = ssh(
                host,
                f"journalctl {args} -n {lines} --no-pager -o short-precise",
                check=False,
                timeout=20,
            )
            text = (out.stdout + out.stderr).strip()
        except (OSError, subprocess.SubprocessError) as exc:
            text = f"(no answer: {type(exc).__name__}: {exc})"
        parts.append(f"--- {host}: journalctl {args} (last {lines} lines)\n{text}")
    reports = sorted(REPORTS.glob("verify-*.json"), key=lambda p: p.stat().st_mtime)
    if reports:
        parts.append(f"--- last verify report: {reports[-1]}\n{reports[-1].read_text()[-4000:]}")
    else:
        parts.append(f"--- no verify report under {REPORTS}")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # Only for failures of tests that had a lab; a failed lab start has its own message.
    if report.failed and call.when == "call" and "lab" in getattr(item, "fixturenames", ()):
        report.sections.append(("lab journals and last verify report", lab_diagnostics()))


@dataclass
class Run:
    """One pyinfra run: exit code, its JSON results (when asked for), and all output."""

    rc: int
    output: str
    results: dict | None
    seconds: float

    def ops(self):
        return (self.results or {}).get("results", {}).get("operations", [])

    def changed(self) -> list[tuple[str, str]]:
        """(operation name, host) for every operation that changed something."""
        return [(op["name"], h) for op in self.ops() for h in op["success"]]

    def errors(self) -> list[tuple[str, str]]:
        return [(op["name"], h) for op in self.ops() for h in op["error"]]

    def planned(self) -> list[tuple[str, str]]:
        """(operation name, host) of every planned change, certain or conditional."""
        return [
            (op["name"], h)
            for op in (self.results or {}).get("plan", [])
            for h in op["hosts_with_change"] + op["hosts_with_conditional_change"]
        ]


def pyinfra(
    *args: str,
    inventory: str = "inventories/lab.py",
    deploy: str = "deploy.py",
    json_out: bool = True,
    env: dict | None = None,
    timeout: int = 900,
) -> Run:
    """Run pyinfra against the lab like an operator would."""
    # -y skips change detection; a --dry plan needs it, so -y only for real runs.
    yes = [] if "--dry" in args else ["-y"]
    cmd = [PYINFRA, *yes, *(["--json"] if json_out else []), *args, inventory, deploy]
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KVCEPH_SECRETS_FILE": str(SECRETS), **(env or {})},
    )
    results = None
    if json_out:
        start = proc.stdout.find("{")
        if start >= 0:
            try:
                results = json.loads(proc.stdout[start:])
            except json.JSONDecodeError:
                results = None
    return Run(proc.returncode, proc.stdout + proc.stderr, results, time.monotonic() - started)


def ssh_argv(host: str) -> list[str]:
    """``ssh`` to a lab host as root: the lab's key, its pinned host keys, no prompt."""
    return [
        "ssh",
        "-i",
        str(LAB_DIR / "id_ed25519"),
        "-o",
        f"UserKnownHostsFile={LAB_DIR / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        f"root@{HOSTS.get(host) or RGW_HOSTS[host]}",
    ]


def ssh(
    host: str, command: str, check: bool = True, timeout: int = 120
) -> subprocess.CompletedProcess:
    """Run a command on a lab host over real SSH, with strict host key checking."""
    proc = subprocess.run(
        [*ssh_argv(host), command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{host}: {command!r} failed ({proc.returncode}): {proc.stderr[-2000:]}"
        )
    return proc


def lab_sh(*args: str, timeout: int = 900) -> str:
    proc = subprocess.run(
        [str(REPO / "lab" / "lab.sh"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"lab.sh {shlex.join(args)} failed: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return proc.stdout


def s3_status() -> str:
    """The HTTP status of GET / on the tests' S3 URL (the lab CA verifies https)."""
    proc = subprocess.run(
        ["curl", "-s", "--cacert", CA_BUNDLE, "-o", "/dev/null", "-w", "%{http_code}", "-m", "5"]
        + [S3_ADMIN_URL + "/"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.stdout.strip()


def stop_rgw() -> None:
    """Every RGW daemon down (the lab's units, or `ceph orch stop`), until S3 stops answering."""
    if CEPHADM:
        ssh("ceph1", "timeout 120 ceph orch stop rgw.standard")
    else:
        ssh("ceph1", "systemctl stop kvlab-rgw@gw1 kvlab-rgw@gw2")
    # cephadm's RGW spec carries rgw_exit_timeout_secs: 120: a stopping radosgw keeps serving
    # open connections (the engines' keep-alive ones through haproxy) for up to 120 s.
    wait = 200 if CEPHADM else 120
    deadline = time.monotonic() + wait
    while s3_status() == "200":
        assert time.monotonic() < deadline, f"RGW still answers {wait} s after the stop"
        time.sleep(2)


def start_rgw() -> None:
    """The RGW daemons back, until S3 answers again."""
    if CEPHADM:
        ssh("ceph1", "timeout 120 ceph orch start rgw.standard")
    else:
        ssh("ceph1", "systemctl start kvlab-rgw@gw1 kvlab-rgw@gw2")
    deadline = time.monotonic() + 180
    while s3_status() != "200":
        assert time.monotonic() < deadline, "RGW not answering 180 s after the start"
        time.sleep(2)


def secrets() -> dict[str, str]:
    return dict(line.split("=", 1) for line in SECRETS.read_text().splitlines() if "=" in line)


def path_style_client(
    endpoint: str, access_key: str, secret_key: str, read_timeout: int = 30, attempts: int = 2
):
    """A boto3 S3 client as the tests use it: path-style, bounded timeouts and retries."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="default",
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        verify=CA_BUNDLE if endpoint.startswith("https:") else None,
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=5,
            read_timeout=read_timeout,
            retries={"max_attempts": attempts},
        ),
    )


def s3_client():
    """The bucket owner's client (the admin key: lists, deletes, lifecycle, policy)."""
    keys = secrets()
    return path_style_client(
        S3_ADMIN_URL, keys["KVCEPH_S3_ADMIN_ACCESS_KEY"], keys["KVCEPH_S3_ADMIN_SECRET_KEY"]
    )


@pytest.fixture(scope="session")
def lab(pytestconfig):
    """A fresh lab for the session (down, then up), torn down at the end.

    KVCEPH_KEEP_LAB=1 reuses a running lab and leaves it running (for looking around);
    the fixture then reports it as not fresh.
    """
    if shutil.which("systemd-nspawn") is None and os.environ.get("CI") is None:
        pytest.skip("systemd-nspawn missing: run `make deps` (CI installs it)")
    keep = bool(os.environ.get("KVCEPH_KEEP_LAB"))
    token = _claim_instance()
    try:
        if not keep:
            subprocess.run(["make", "-s", "lab-down"], cwd=REPO, check=True, timeout=600)
        _lab_up(pytestconfig)
        yield {"hosts": HOSTS, "fresh": not keep}
        if not keep:
            subprocess.run(["make", "-s", "lab-down"], cwd=REPO, check=False, timeout=600)
    finally:
        if token:
            CLAIM.release(token, LAB_DIR)


def _load_claim():
    spec = importlib.util.spec_from_file_location("kvceph_lab_claim", REPO / "lab" / "claim.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


CLAIM = _load_claim()


def _claim_instance() -> str | None:
    """The lab instance for this session (lab/claim.py), unless the run that started us holds it.

    Under `make test` the claim is make's and this passes; a pytest run by hand claims the
    instance itself, so a second run on it stops at once instead of rebooting our hosts.
    """
    try:
        token, mine = CLAIM.acquire(f"pytest {shlex.join(sys.argv[1:])}", lab=LAB_DIR)
    except CLAIM.Busy as busy:
        pytest.exit(str(busy), returncode=CLAIM.BUSY_RC)
    if not mine:
        return None
    os.environ[CLAIM.ENV] = token  # lab.sh and make, run by the tests, pass under it
    return token


# The lab's boot steps shown in the test output while they run (pytest -q otherwise shows
# nothing for minutes): the lab scripts' own tagged lines, one per step, no command output.
_STEP = re.compile(
    r"^(\[(lab|image|cephadm-images|kvlab-cephadm|wheelhouse|deps|venv)\] |== kvceph lab)"
)


def _lab_up(pytestconfig) -> None:
    """`make -s lab-up`, its step lines on the terminal as they come, all of it on failure."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        ["make", "-s", "lab-up"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        for line in proc.stdout:
            lines.append(line)
            if reporter is not None and _STEP.match(line):
                with capture.global_and_fixture_disabled():
                    reporter.write_line(f"{time.monotonic() - t0:5.0f}s {line.rstrip()}")
        rc = proc.wait(timeout=1800)
    sys.stdout.write("".join(lines))  # captured: pytest shows it with a failure
    assert rc == 0, f"make lab-up failed ({rc}): {''.join(lines)[-4000:]}"


def lab_used_after(request) -> bool:
    """Whether a test after the requesting one in this session uses the lab (any fixture
    that needs `lab`, `converged` included)."""
    items = request.session.items
    node = request.node
    # a module- or class-scoped fixture's node is no item: the last item under it counts
    last = max(i for i, item in enumerate(items) if node is item or node in item.listchain())
    return any("lab" in item.fixturenames for item in items[last + 1 :])


def restore_needed(request, lab) -> bool:
    """Whether a fixture that changed the lab's settings must deploy the committed ones again:
    not when no later test uses the lab and the session tears it down (a deploy of ~40 s that
    `make lab-down` undoes at once); always under KVCEPH_KEEP_LAB, which leaves the lab up."""
    return not lab["fresh"] or lab_used_after(request)


@pytest.fixture(scope="session")
def converged(lab):
    """The first converge from empty; later tests start from a converged lab."""
    run = pyinfra()
    assert run.rc == 0, run.output[-6000:]
    return run


# --- Local single-node Ceph for the @local tests (test_ceph_local.py, test_s3_local.py) -------
# One throwaway Pacific cluster on this machine (lab/ceph/single-node.sh), shared by both files,
# distinct from the lab's ceph1. KVCEPH_LOCAL_CEPH_CONF=<ceph.conf> uses a running cluster instead
# (its RGW on KVCEPH_LOCAL_CEPH_RGW_PORT; it is neither started nor stopped here).

LOCAL_CEPH_RECIPE = REPO / "lab" / "ceph" / "single-node.sh"
LOCAL_CEPH_TOOLS = ("ceph", "radosgw-admin", "radosgw", "ceph-mon", "ceph-mgr", "ceph-osd")


@dataclass(frozen=True)
class LocalCeph:
    """A reachable local cluster: its admin config, RGW port and the recipe's S3 user keys."""

    conf: str
    rgw_port: int
    access_key: str
    secret_key: str

    def env(self) -> dict[str, str]:
        """os.environ with CEPH_CONF pointing at this cluster, for subprocesses."""
        return {**os.environ, "CEPH_CONF": self.conf}


def _local_ceph_answers(conf: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["timeout", "30", "ceph", "--connect-timeout", "10", "health"],
        env={**os.environ, "CEPH_CONF": conf},
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="session")
def local_ceph(tmp_path_factory):
    """A single-node Ceph with RGW on 127.0.0.1 for the session, stopped and purged at the end.

    Ports: KVCEPH_LOCAL_CEPH_MON_PORT (3320), KVCEPH_LOCAL_CEPH_RGW_PORT (7420).
    """
    given = os.environ.get("KVCEPH_LOCAL_CEPH_CONF")
    rgw_port = int(os.environ.get("KVCEPH_LOCAL_CEPH_RGW_PORT", "7420"))
    tools = ("ceph", "radosgw-admin") if given else LOCAL_CEPH_TOOLS
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        why = f"{', '.join(missing)} not installed: run `make deps`"
        # CI installs the packages: a missing one there is a broken CI, not a reason to skip.
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    if given:
        health = _local_ceph_answers(given)
        assert health.returncode == 0, f"KVCEPH_LOCAL_CEPH_CONF={given}: {health.stderr[-2000:]}"
        yield LocalCeph(
            given,
            rgw_port,
            os.environ.get("S3_ACCESS_KEY", "testaccess"),
            os.environ.get("S3_SECRET_KEY", "testsecret"),
        )
        return

    import secrets as _secrets  # module-level `secrets()` above is the lab's helper

    data = tmp_path_factory.mktemp("local-ceph")
    ceph = LocalCeph(
        str(data / "ceph.conf"),
        rgw_port,
        "KVLOCAL" + _secrets.token_hex(6).upper(),
        _secrets.token_urlsafe(24),
    )
    env = {
        **os.environ,
        "MON_PORT": os.environ.get("KVCEPH_LOCAL_CEPH_MON_PORT", "3320"),
        "RGW_PORT": str(rgw_port),
        "S3_ACCESS_KEY": ceph.access_key,
        "S3_SECRET_KEY": ceph.secret_key,
    }
    stop = [str(LOCAL_CEPH_RECIPE.with_name("single-node-stop.sh")), str(data), "--purge"]
    try:
        start = subprocess.run(
            [str(LOCAL_CEPH_RECIPE), str(data)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        if start.returncode != 0:
            logs = (
                "\n".join(
                    f"== {log.name}\n{log.read_text(errors='replace')[-1500:]}"
                    for log in sorted((data / "log").glob("*.log"))
                )
                if (data / "log").is_dir()
                else ""
            )
            pytest.fail(f"{LOCAL_CEPH_RECIPE} failed:\n{start.stdout[-3000:]}\n{logs[-6000:]}")
        health = _local_ceph_answers(ceph.conf)
        assert health.returncode == 0, f"fresh local Ceph does not answer: {health.stderr}"
        yield ceph
    finally:
        # By pid file, only daemons whose CEPH_CONF is this data dir: never the lab's ceph1.
        subprocess.run(stop, capture_output=True, text=True, timeout=180, check=False)


# --- end of the local single-node Ceph block ---------------------------------------------------
