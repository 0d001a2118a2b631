"""The RGW stage against the real orchestrator: the cephadm lab (KVCEPH_LAB_CEPH=cephadm,
Ceph 20.2.4 managed by cephadm inside ceph1 and rgw2, RGW behind cephadm's ingress on one VIP
per rgw host)."""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from datetime import UTC, datetime

import pytest
from conftest import CEPHADM, LAB_DIR, RGW_HOSTS, S3_SCHEME, pyinfra, s3_status, ssh

pytestmark = pytest.mark.skipif(
    not CEPHADM, reason="needs the cephadm lab (KVCEPH_LAB_CEPH=cephadm)"
)
REFUSAL = "ServiceSpec: RGWSpec.__init__() got an unexpected keyword argument 'concentrator'"
RGW_SPEC = "RGW service | Apply the rgw.standard spec (read back: exported, all daemons running)"


def orch(*args: str) -> list | dict:
    out = ssh("ceph1", "timeout 60 ceph " + " ".join(args) + " -f json").stdout
    return json.loads(out) if out.strip().startswith(("[", "{")) else []


def rgw_daemons() -> list[tuple[str, str]]:
    return sorted(
        (d["daemon_name"], d["status_desc"]) for d in orch("orch ps --service_name rgw.standard")
    )


def exported() -> dict:
    return orch("orch ls --service_name rgw.standard --export")[0]


def errors(run) -> list[str]:
    return [line for line in run.output.splitlines() if line.startswith("--> ") and "rror" in line]


def test_concentrator_refused_by_the_cluster_stops_before_anything(converged):
    before = exported()
    # Concentrator wanted, no VIP to fall back to: the dry run's refusal stops the run.
    run = pyinfra("--data", "kvceph_rgw_ingress_virtual_ips=null")
    assert run.rc != 0
    (line,) = [e for e in errors(run) if "concentrator" in e]
    assert "Ceph 20.2.4 (tentacle, announced with concentrators)" in line
    assert REFUSAL in line and "kvceph_rgw_ingress_virtual_ip" in line
    assert run.changed() == []
    assert "Starting operation: Ceph pools" not in run.output
    assert exported() == before


def test_forced_concentrator_is_reported_as_the_failure_it_is(converged):
    before = exported()
    run = pyinfra("--data", "kvceph_allow_unprobed_concentrator=true")
    assert run.rc != 0
    assert f"kvceph: ceph orch apply rgw.standard refused: {REFUSAL}" in run.output
    assert (RGW_SPEC, "ceph1") not in run.changed()
    assert exported() == before  # the orchestrator stored nothing


# The lab's own count (1 per host) last, so the lab ends as its settings say.
@pytest.mark.parametrize("count", [2, 1])
def test_count_per_host_converges(converged, count):
    run = pyinfra("--data", f"kvceph_rgw_count_per_host={count}")
    assert run.rc == 0, errors(run) or run.output[-4000:]  # ceph1's line, not the run's tail
    daemons = rgw_daemons()
    assert [s for _, s in daemons] == ["running"] * count * len(RGW_HOSTS), daemons
    assert exported()["placement"]["count_per_host"] == count
    again = pyinfra("--data", f"kvceph_rgw_count_per_host={count}")
    assert again.rc == 0 and again.changed() == [], again.changed()


def both_running_in_the_orchestrators_cache(wait: int = 60) -> None:
    """cephadm refuses to stop an RGW while it counts fewer than 2 running (ok-to-stop), and
    counts from a cache that a restart a minute before can leave stale: refresh it first."""
    deadline = time.monotonic() + wait
    want = ["running"] * len(RGW_HOSTS) * exported()["placement"]["count_per_host"]
    while [s for _, s in rgw_daemons()] != want and time.monotonic() < deadline:
        ssh("ceph1", "timeout 60 ceph orch ps --refresh >/dev/null", check=False)
        time.sleep(5)


def test_a_stopped_rgw_daemon_leaves_s3_up_through_haproxy(converged):
    both_running_in_the_orchestrators_cache()
    name, _ = rgw_daemons()[0]
    ssh("ceph1", f"timeout 60 ceph orch daemon stop {name}")
    try:
        # `stopped`, never `error`: the lab's kvceph_rgw_exit_timeout_secs 5 lets radosgw end
        # its drain before podman's 10 s SIGKILL (which made this test intermittent).
        state = wait_daemon(name, ("stopped", "error"))
        assert state == "stopped", rgw_daemons()
        # Every request through the VIP answers while one backend is down (haproxy retries).
        codes = [s3_status() for _ in range(20)]
        assert codes == ["200"] * 20, codes
        run = pyinfra()
        assert run.rc == 0, run.output[-4000:]
        assert "Readiness check | Engine answers on port 8000" in run.output
    finally:
        start_daemon(name)


def wait_daemon(name: str, states: tuple[str, ...], wait: int = 90) -> str | None:
    """The daemon's status once it is one of ``states`` (None: not within ``wait`` s)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = {d["daemon_name"]: d["status_desc"] for d in orch("orch ps")}.get(name)
        if state in states:
            return state
        time.sleep(3)
    return None


def start_daemon(name: str) -> None:
    ssh("ceph1", f"timeout 60 ceph orch daemon start {name}", check=False)
    assert wait_daemon(name, ("running",), wait=120) == "running", orch("orch ps")


def in_background(fn, *args, **kwargs) -> dict:
    """Run ``fn`` in a thread; the returned dict gets ``result`` and is ``join``-able."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=fn(*args, **kwargs)))
    thread.start()
    box["join"] = thread.join
    return box


def test_an_rgw_daemon_stopped_during_a_deploy_costs_it_nothing(converged):
    name, _ = rgw_daemons()[0]
    background = in_background(pyinfra)
    try:
        time.sleep(20)  # the converged run is in its Ceph / RGW stages by then
        # --force: a daemon that dies does not ask cephadm's ok-to-stop, which refused this stop
        # ("Not enough remaining RGW daemons") even with both counted running just before.
        ssh("ceph1", f"timeout 60 ceph orch daemon stop {name} --force")
        background["join"]()
        run = background["result"]
        assert run.rc == 0, run.output[-4000:]
        assert run.changed() == [], run.changed()
    finally:
        background["join"]()
        start_daemon(name)


def test_an_rgw_daemon_stopped_during_verify_fails_no_check(converged):
    both_running_in_the_orchestrators_cache()  # the previous test's restarted daemon
    name, _ = rgw_daemons()[0]
    background = in_background(pyinfra, deploy="verify.py")
    try:
        time.sleep(15)  # verify's warm/cross steps run through the VIP by then
        # --force: a daemon that dies does not ask cephadm's ok-to-stop, which refused this stop
        # ("Not enough remaining RGW daemons") even with both counted running just before.
        ssh("ceph1", f"timeout 60 ceph orch daemon stop {name} --force")
        background["join"]()
        run = background["result"]
        assert run.rc == 0, run.output[-4000:]
    finally:
        background["join"]()
        start_daemon(name)


def test_the_ingress_backend_gone_is_one_line_naming_the_ingress(converged):
    # Every rgw host's haproxy: with one left, keepalived moves the VIPs to it (test_15).
    haproxys = [
        d["daemon_name"]
        for d in orch("orch ps --service_name ingress.rgw.standard")
        if d["daemon_type"] == "haproxy"
    ]
    assert len(haproxys) == len(RGW_HOSTS), haproxys
    for haproxy in haproxys:
        ssh("ceph1", f"timeout 60 ceph orch daemon stop {haproxy}")
    try:
        deadline = time.monotonic() + 60
        while s3_status() == "200":
            assert time.monotonic() < deadline, "S3 still answers 60 s after haproxy stopped"
            time.sleep(2)
        run = pyinfra()
        assert run.rc != 0
        (line,) = [e for e in errors(run) if "cannot reach RGW" in e]
        assert "from ceph1" in line and "ingress.rgw.standard` (haproxy, keepalived)" in line
        assert "ceph orch daemon start <name>" in line
        assert run.changed() == [], run.changed()
    finally:
        for haproxy in haproxys:
            start_daemon(haproxy)
    again = pyinfra()
    assert again.rc == 0 and again.changed() == [], again.output[-4000:]


def test_an_orchestrator_without_a_mgr_stops_in_one_line_and_the_next_run_converges(converged):
    fsid = ssh("ceph1", "timeout 60 ceph fsid").stdout.strip()
    units = " ".join(f"ceph-{fsid}@{d['daemon_name']}" for d in orch("orch ps --daemon_type mgr"))
    assert units.count("@mgr.") == 2, units
    ssh("ceph1", f"systemctl stop {units}")
    try:
        run = pyinfra("--data", "kvceph_ceph_command_timeout=20")
        assert run.rc != 0
        (line,) = [e for e in errors(run) if "gave no answer" in e]
        assert "ceph1: RGW service: `ceph orch status` gave no answer in 20 s" in line
        assert "fix: on ceph1 check `ceph mgr stat`" in line
        assert run.changed() == [], run.changed()
    finally:
        ssh("ceph1", f"systemctl start {units}")
        deadline = time.monotonic() + 180
        while (orch("orch status") or {}).get("available") is not True:
            assert time.monotonic() < deadline, "the orchestrator is not back 180 s after the mgrs"
            time.sleep(5)
    again = pyinfra()
    # The error lines first: the run's tail is the inference hosts' "No changes".
    assert again.rc == 0 and again.changed() == [], errors(again) or again.output[-4000:]


# Paused mgrs answer late, not never: shorter than the mons' mgr beacon grace (30 s), so the
# cluster keeps them, and shorter than the run's command timeout, so the run waits them out.
PAUSE_S = 15
SEEN = "/run/kvceph-test-mgrs-paused"


def test_a_slow_orchestrator_is_waited_for_and_the_run_converges(converged):
    pids = ssh("ceph1", "pgrep -x ceph-mgr").stdout.split()
    assert len(pids) == 2, pids
    both = " ".join(pids)
    # Both mgrs stopped (SIGSTOP); a watcher on ceph1 resumes them PAUSE_S after the run's
    # first `ceph orch` call appears (or after 120 s), and notes that it saw one. The calls
    # read `ceph --connect-timeout N orch ...`; "[o]rch" keeps the watcher's own command line
    # from matching (nothing else in it may hold "orch" either).
    watch = (
        f"rm -f {SEEN}; kill -STOP {both}; end=$(( $(date +%s) + 120 )); "
        'while [ "$(date +%s)" -lt "$end" ]; do '
        f'if pgrep -f "ceph .*[o]rch" >/dev/null; then date +%s > {SEEN}; sleep {PAUSE_S}; break; '
        f"fi; sleep 0.2; done; kill -CONT {both}"
    )
    ssh("ceph1", f"setsid sh -c '{watch}' </dev/null >/dev/null 2>&1 &")
    try:
        states = ssh("ceph1", f"for p in {both}; do cut -d' ' -f3 /proc/$p/stat; done")
        assert states.stdout.split() == ["T", "T"], states.stdout
        run = pyinfra("--data", f"kvceph_ceph_command_timeout={3 * PAUSE_S}")
        seen = ssh("ceph1", f"cat {SEEN}", check=False)
        assert seen.returncode == 0, "the run sent no `ceph orch` call while the mgrs were paused"
        assert run.rc == 0, run.output[-4000:]
        assert run.changed() == [], run.changed()
    finally:
        ssh("ceph1", f"kill -CONT {both}; rm -f {SEEN}", check=False)


@pytest.mark.parametrize("port", [8090, 8080])
def test_frontend_port_change_converges_and_ingress_follows(converged, port):
    run = pyinfra("--data", f"kvceph_rgw_frontend_port={port}")
    assert run.rc == 0, run.output[-4000:]
    assert exported()["spec"]["rgw_frontend_port"] == port
    ports = sorted(p for d in orch("orch ps --service_name rgw.standard") for p in d["ports"])
    count = exported()["placement"]["count_per_host"]
    assert ports == sorted([port + i for i in range(count)] * len(RGW_HOSTS)), ports
    # cephadm rewrites haproxy's backends: S3 answers through the VIP on the new ports.
    assert s3_status() == "200"


@pytest.mark.skipif(S3_SCHEME != "https", reason="the lab runs the http variant")
def test_ingress_tls_key_is_compared_by_hash_and_never_shown(converged):
    """haproxy serves the lab CA's certificate on the VIP; the key is never in pyinfra's output."""
    assert s3_status() == "200"  # curl --cacert <lab CA>: the VIP's certificate verifies
    key_lines = (LAB_DIR / "tls" / "s3.key").read_text().splitlines()[1:-1]
    # -vvv prints every fact's and command's output: the spec export the plan compares with too.
    run = pyinfra("-vvv", json_out=False)
    assert run.rc == 0, run.output[-4000:]
    assert "ingress.rgw.standard already has this spec" in run.output
    assert "PRIVATE KEY" not in run.output
    assert not any(line in run.output for line in key_lines)


def test_rgw_dns_name_change_restarts_rgw_through_the_orchestrator(converged):
    """RGW reads rgw_dns_name only at start: a change restarts the service's daemons through the
    orchestrator, one at a time (each running again before the next: issue 52 item 6).

    Run on ceph1 only (--limit): the lab certificate names *.s3.kvlab, so inference hosts would
    (rightly) fail their TLS check against another name; the RGW side is what is tested here.
    """

    def started_after(t0: datetime) -> list[tuple[str, str, bool]]:
        # Start times, not a before/after map: the orchestrator's daemon cache can still list
        # daemons a previous test replaced (port change) until its next refresh.
        return sorted(
            (d["daemon_name"], d["status_desc"], datetime.fromisoformat(d["started"]) > t0)
            for d in orch("orch ps --service_name rgw.standard")
        )

    def dns_name() -> str:
        # kvceph's section only (client.rgw.<service id>): other RGW services keep their name.
        cmd = "timeout 60 ceph config get client.rgw.standard rgw_dns_name"
        return ssh("ceph1", cmd).stdout.strip()

    port = {"https": 443, "http": 80}[S3_SCHEME]
    other = (
        "--data", "kvceph_rgw_dns_name=s3b.kvlab",
        "--data", f"kvceph_s3_endpoint={S3_SCHEME}://s3b.kvlab:{port}",
        "--limit", "ceph1",
    )  # fmt: skip
    count = exported()["placement"]["count_per_host"]
    t0 = datetime.now(UTC)
    try:
        run = pyinfra(*other)
        assert run.rc == 0, run.output[-4000:]
        (op,) = [n for n, h in run.changed() if h == "ceph1" and "rgw_dns_name" in n]
        assert "s3b.kvlab" in op and "daemons one at a time" in op
        assert dns_name() == "s3b.kvlab"
        daemons = started_after(t0)
        want = [("running", True)] * count * len(RGW_HOSTS)
        assert [(s, new) for _, s, new in daemons] == want, daemons
        again = pyinfra(*other)
        assert again.rc == 0 and again.changed() == [], again.changed()
    finally:
        back = pyinfra("--limit", "ceph1")
    assert back.rc == 0, back.output[-4000:]
    assert dns_name() == "s3.kvlab"
    assert s3_status() == "200"
    # The inference hosts were never touched: the whole lab is converged as it was.
    assert pyinfra().changed() == []


def self_signed_pem() -> str:
    """A certificate and key for the other tenant's SSL frontend (cephadm reads both)."""
    out = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=s3.tenant.example", "-keyout", "/dev/stdout", "-out", "/dev/stdout"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout


def cluster_state() -> tuple[str, str]:
    """Every service spec and the whole config database, as the cluster prints them."""
    specs = ssh("ceph1", "timeout 60 ceph orch ls --export").stdout
    return specs, ssh("ceph1", "timeout 60 ceph config dump").stdout


TENANT_ZONE = (
    "radosgw-admin realm create --rgw-realm=tenantrealm"
    " && radosgw-admin zonegroup create --rgw-realm=tenantrealm --rgw-zonegroup=tenantzg --master"
    " && radosgw-admin zone create --rgw-realm=tenantrealm --rgw-zonegroup=tenantzg"
    " --rgw-zone=tenantzone --master"
)
TENANT_ZONE_RM = (
    "radosgw-admin zonegroup remove --rgw-realm=tenantrealm --rgw-zonegroup=tenantzg"
    " --rgw-zone=tenantzone; radosgw-admin zone delete --rgw-realm=tenantrealm"
    " --rgw-zone=tenantzone; radosgw-admin zonegroup delete --rgw-realm=tenantrealm"
    " --rgw-zonegroup=tenantzg; radosgw-admin realm rm --rgw-realm=tenantrealm"
)


def test_an_rgw_service_kvceph_did_not_create_is_refused_then_merged_on_opt_in(converged):
    """Another tenant's RGW (own realm/zone, SSL) and its rgw_dns_name: the deploy pointed at
    it stops in one line naming both and changes nothing; with the opt-in, the plan takes the
    pool names from the tenant's zone and merges the spec (realm, zone, SSL, placement kept),
    showing each difference."""
    pem = self_signed_pem()
    spec = {
        "service_type": "rgw",
        "service_id": "tenant",
        "unmanaged": True,  # the spec is what matters here, not its daemons
        "placement": {"count": 1},
        "spec": {
            "rgw_realm": "tenantrealm",
            "rgw_zonegroup": "tenantzg",
            "rgw_zone": "tenantzone",
            "ssl": True,
            "rgw_frontend_port": 8443,
            "rgw_frontend_ssl_certificate": pem,
        },
    }
    path = "/tmp/kvtest-tenant-spec.yaml"  # as kvceph's own specs travel (the CLI's mounts)
    tenant = ("--data", "kvceph_rgw_service_id=tenant", "--limit", "ceph1")
    try:
        ssh("ceph1", TENANT_ZONE, timeout=300)
        ssh("ceph1", f"printf %s {shlex.quote(json.dumps(spec))} > {path}")
        ssh("ceph1", f"timeout 60 ceph orch apply -i {path}; rm -f {path}")
        ssh("ceph1", "timeout 60 ceph config set client.rgw.tenant rgw_dns_name s3.tenant.example")
        before = cluster_state()
        run = pyinfra(*tenant)
        assert run.rc != 0
        (line,) = [e for e in errors(run) if "does not own" in e]
        assert "service rgw.tenant exists and kvceph did not create it" in line
        assert "rgw_realm tenantrealm; rgw_zonegroup tenantzg; rgw_zone tenantzone; SSL" in line
        assert "client.rgw.tenant/rgw_dns_name = 's3.tenant.example' was set outside" in line
        assert "kvceph_adopt=rgw.tenant,client.rgw.tenant/rgw_dns_name" in line
        assert run.changed() == []
        assert cluster_state() == before

        adopt = ("--data", "kvceph_adopt=rgw.tenant,client.rgw.tenant/rgw_dns_name")
        plan = pyinfra("--dry", *tenant, *adopt, json_out=False)
        assert plan.rc != 0  # the tenant zone's pools are not the ones kvceph_ceph_pools names
        assert "zone tenantzone keeps buckets in tenantzone.rgw.buckets.data (data)" in plan.output
        pools = [
            {"name": "tenantzone.rgw.buckets.data", "pg_num": 8, "size": 1, "min_size": 1},
            {"name": "tenantzone.rgw.buckets.index", "pg_num": 8, "size": 1, "min_size": 1},
        ]
        named = ("--data", f"kvceph_ceph_pools={json.dumps(pools)}")
        plan = pyinfra("--dry", *tenant, *adopt, *named, json_out=False)
        adopting = [x for x in plan.output.splitlines() if "rgw.tenant: adopting:" in x]
        assert any("spec.rgw_frontend_port: 8443 -> 8080" in x for x in adopting), (
            adopting or plan.output[-4000:]
        )
        assert not [x for x in adopting if "realm" in x or "zone" in x or "ssl" in x], adopting
        assert not [x for x in adopting if "placement" in x], adopting
        assert cluster_state() == before  # a plan only
    finally:
        ssh("ceph1", "timeout 60 ceph orch rm rgw.tenant", check=False)
        ssh("ceph1", "timeout 60 ceph config rm client.rgw.tenant rgw_dns_name", check=False)
        ssh("ceph1", TENANT_ZONE_RM, check=False, timeout=300)


def test_kvceph_pools_keep_their_pg_count_with_the_autoscaler_on(converged):
    """The lab runs Ceph's default (autoscaler on): kvceph's pools are off, at kvceph's count."""
    default = ssh("ceph1", "timeout 60 ceph config get mon osd_pool_default_pg_autoscale_mode")
    assert default.stdout.strip() == "on"
    status = {p["pool_name"]: p for p in orch("osd pool ls detail")}
    wanted = {"default.rgw.buckets.data": 32, "default.rgw.buckets.index": 8}  # group_data/lab.py
    for pool, pg_num in wanted.items():
        assert status[pool]["pg_autoscale_mode"] == "off", status[pool]
        assert status[pool]["pg_num_target"] == pg_num, status[pool]
    # RGW's own pools (not kvceph's) stay the autoscaler's.
    assert status["default.rgw.log"]["pg_autoscale_mode"] == "on"


def test_an_rgw_user_kvceph_did_not_create_is_refused_and_its_own_are_marked(lab, converged):
    """kvceph's user, bucket, pools and services carry its markers; an RGW user someone else
    created, named as kvceph's, stops the S3 tier before any S3 write, in one line naming it and
    the opt-in."""
    markers = json.loads(ssh("ceph1", "timeout 60 ceph config-key dump kvceph/owned/").stdout)
    fsid = ssh("ceph1", "timeout 60 ceph fsid").stdout.strip()
    # The bucket's owner and each cache group's user (issue 36), and the bucket: each a record of
    # what kvceph created, on which cluster (issue 52 item 7); a bucket's also its digest.
    for uid in ("kvceph-s3-admin", "lmcache-gpu", "lmcache-gaudi"):
        record = json.loads(markers[f"kvceph/owned/s3-user/{uid}"])
        assert (record["state"], record["fsid"]) == ("created", fsid), markers
    bucket = json.loads(markers["kvceph/owned/bucket/lmcache"])
    assert (bucket["state"], bucket["fsid"]) == ("created", fsid) and bucket["digest"], markers
    # The pools and services kvceph created on this lab: records too (a kept lab's may be bare).
    kinds = ("kvceph/owned/pool/", "kvceph/owned/service/")
    owned = {k: v for k, v in markers.items() if k.startswith(kinds)}
    assert {k for k in owned if k.startswith(kinds[0])} >= {
        "kvceph/owned/pool/default.rgw.buckets.data", "kvceph/owned/pool/default.rgw.buckets.index"
    }, markers  # fmt: skip
    for key, value in owned.items():
        if lab["fresh"] or value.startswith("{"):
            record = json.loads(value)
            assert record["state"] in ("created", "adopted"), (key, value)
            assert record["fsid"] == fsid and record["digest"] and record["time"], (key, value)
    uid = "kvtest-tenant-user"
    ssh("ceph1", f"radosgw-admin user create --uid={uid} --display-name=tenant >/dev/null")
    try:
        before = ssh("ceph1", f"radosgw-admin user info --uid={uid}").stdout
        run = pyinfra("--data", f"kvceph_s3_admin_user={uid}", "--limit", "ceph1")
        assert run.rc != 0
        (line,) = [e for e in errors(run) if "did not create" in e]
        assert f"RGW user {uid} exists and kvceph did not create it" in line, line
        assert f"--data kvceph_adopt=s3-user/{uid}" in line, line
        assert run.changed() == []
        assert ssh("ceph1", f"radosgw-admin user info --uid={uid}").stdout == before
    finally:
        ssh("ceph1", f"radosgw-admin user rm --uid={uid}", check=False)
