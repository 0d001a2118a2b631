"""RGW spec choice by Ceph release, rendering, and validation against Pacific's own schema."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import OperationError

from deploys import settings, specs
from deploys.facts.ceph import version_key
from deploys.operations.ceph import spec_differences
from deploys.settings.reader import SettingsError
from deploys.stages import rgw_service

PACIFIC = {"oldest": "16.2.15", "release": "pacific", "versions": ["16.2.15"]}
TENTACLE = {"oldest": "20.2.0", "release": "tentacle", "versions": ["20.2.0"]}
SYSTEM_PYTHON = Path("/usr/bin/python3")
FACTS = Path(__file__).resolve().parent.parent / "facts"
TENTACLE_FIXTURES = FACTS.parent / "fixtures" / "ceph-tentacle-20.2.4"


def rgw(**data):
    base = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
    return settings.load({**base, **data}, "ceph1", ["ceph_admin", "rgw"]).rgw


VIP = {"kvceph_rgw_ingress_virtual_ip": "10.67.67.100/24"}


# The orchestrator's answers to the concentrator dry run (tests/facts/ceph.CephSpecProbe).
REFUSED = json.loads((FACTS / "ceph.CephSpecProbe" / "tentacle_20_2_4_refused.json").read_text())[
    "fact"
]
ACCEPTED = json.loads((FACTS / "ceph.CephSpecProbe" / "ibm_8_1_accepted.json").read_text())["fact"]
IBM_81 = {"oldest": "19.2.1-222.el9cp", "release": "squid", "versions": ["19.2.1-222.el9cp"]}


@pytest.mark.parametrize(
    ("version", "announced"),
    [
        ("16.2.15", False),  # Pacific
        ("19.2.3", False),  # Squid upstream
        ("20.1.0", False),  # Tentacle release candidate
        ("20.2.0", True),
        ("21.1.0", True),
        ("19.2.0-53.el9cp", False),  # IBM Storage Ceph 8.0
        ("19.2.1-222.el9cp", True),  # IBM Storage Ceph 8.1
    ],
)
def test_concentrator_announcement_by_version_is_only_a_hint(version, announced):
    assert rgw_service.concentrator_announced(version) is announced


def test_version_key_orders_downstream_builds():
    assert version_key("19.2.1-222.el9cp") == (19, 2, 1, 222)
    assert version_key("16.2.15") < version_key("19.2.1-222.el9cp") < version_key("20.2.0")


def test_an_orchestrator_that_accepts_the_dry_run_gets_the_seed_spec():
    # IBM Storage Ceph 8.1: not run here; its answer is the preview table (plausible fixture).
    got, notice = rgw_service.plan_specs(rgw(), IBM_81, ACCEPTED)
    assert notice is None
    assert got == [
        {
            "service_type": "rgw",
            "service_id": "standard",
            "service_name": "rgw.standard",
            "placement": {"count_per_host": 4, "label": "kvceph-rgw"},
            "networks": ["10.67.67.0/24"],
            "spec": {
                "rgw_frontend_port": 8080,
                "concentrator": "haproxy",
                "concentrator_frontend_port": 80,
            },
        }
    ]


def test_accepted_concentrator_with_vip_says_the_vip_is_unused():
    got, notice = rgw_service.plan_specs(rgw(**VIP), IBM_81, ACCEPTED)
    assert len(got) == 1 and "not used" in notice


def test_tentacle_20_2_4_refusal_without_vip_stops_with_the_clusters_words():
    # Announced with concentrators, refused by the real 20.2.4: the answer decides.
    with pytest.raises(rgw_service.SpecError) as exc:
        rgw_service.plan_specs(rgw(), TENTACLE, REFUSED)
    message = str(exc.value)
    assert "\n" not in message
    assert "Ceph 20.2.0 (tentacle, announced with concentrators)" in message
    assert "unexpected keyword argument 'concentrator'" in message
    assert "kvceph_rgw_ingress_virtual_ip" in message
    assert "kvceph_allow_unprobed_concentrator" in message


def test_refusal_with_vip_gets_rgw_plus_ingress():
    got, notice = rgw_service.plan_specs(rgw(**VIP), PACIFIC, REFUSED)
    plain, ingress = got
    assert "concentrator" not in plain["spec"]
    assert ingress == {
        "service_type": "ingress",
        "service_id": "rgw.standard",
        "service_name": "ingress.rgw.standard",
        "placement": {"label": "kvceph-rgw"},
        "spec": {
            "backend_service": "rgw.standard",
            "virtual_ip": "10.67.67.100/24",
            "frontend_port": 80,
            "monitor_port": specs.INGRESS_MONITOR_PORT,
        },
    }
    assert "ingress service on 10.67.67.100/24" in notice
    # issue 53 item 2: a normal run's line says what kvceph does, not the orchestrator's error
    assert "unexpected keyword argument" not in notice and "Error" not in notice
    assert "takes no RGW concentrator" in notice and "cephadm's ingress instead" in notice


VIPS = {"kvceph_rgw_ingress_virtual_ips": ["10.67.67.100/24", "10.67.67.101/24"]}


def test_one_vip_per_rgw_host_gives_cephadm_a_virtual_ips_list():
    (_, ingress), notice = rgw_service.plan_specs(rgw(**VIPS), PACIFIC, REFUSED)
    assert ingress["spec"] == {
        "backend_service": "rgw.standard",
        "virtual_ips_list": ["10.67.67.100/24", "10.67.67.101/24"],
        "frontend_port": 80,
        "monitor_port": specs.INGRESS_MONITOR_PORT,
    }
    assert "virtual_ip:" not in specs.dump(ingress)  # cephadm refuses a spec with both
    assert "ingress service on 10.67.67.100/24, 10.67.67.101/24 port 80" in notice
    # a list of one is the single key: a cluster converged with virtual_ip sees no change
    one = rgw(kvceph_rgw_ingress_virtual_ips=["10.67.67.100/24"])
    assert specs.ingress_spec(one) == specs.ingress_spec(rgw(**VIP))


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({**VIP, **VIPS}, "kvceph_rgw_ingress_virtual_ips = .*together with"),
        ({"kvceph_rgw_ingress_virtual_ips": []}, "is empty; fix: list one address per rgw"),
        ({"kvceph_rgw_ingress_virtual_ips": ["10.0.0.1/24", "10.0.0.1/25"]}, "twice"),
        ({"kvceph_rgw_ingress_virtual_ips": ["10.0.0.1/24", "fd00::1/64"]}, "IPv4 and IPv6"),
        ({"kvceph_rgw_ingress_virtual_ips": ["10.0.0.300/24"]}, "is not an IP/prefix"),
    ],
)
def test_vip_list_settings_are_refused_in_one_line(data, words):
    with pytest.raises(SettingsError, match=words):
        rgw(**data)


def test_more_vips_than_rgw_hosts_stop_before_any_host_is_touched():
    from deploys import preflight

    me = settings.load({"kvceph_rgw_managed_by": "cephadm", **VIPS}, "ceph1", ["ceph_admin", "rgw"])
    preflight.check_ingress_hosts({"ceph1": me}, ["10.67.67.11", "10.67.67.12"])
    with pytest.raises(SettingsError) as err:
        preflight.check_ingress_hosts({"ceph1": me}, ["10.67.67.11"])
    # What 20.2.4 does with it instead: accepts the apply, fails later in its log only.
    recorded = (TENTACLE_FIXTURES / "ingress_two_vips_one_host.txt").read_text()
    assert "Scheduled ingress.rgw.standard update..." in recorded
    assert "[ERR] Number of virtual IPs for ingress is greater than number of available hosts" in (
        recorded
    )
    assert str(err.value) == (
        "ceph1: kvceph_rgw_ingress_virtual_ips = ['10.67.67.100/24', '10.67.67.101/24']: 2 VIPs "
        "for 1 host(s) of the rgw group; cephadm gives each VIP its own host and refuses more "
        "VIPs than hosts; fix: list at most one VIP per rgw host"
    )


def test_opt_in_forces_the_concentrator_spec_and_says_so():
    got, notice = rgw_service.plan_specs(rgw(**VIP), TENTACLE, REFUSED, force=True)
    assert "concentrator" in got[0]["spec"]
    assert len(got) == 1
    assert "kvceph_allow_unprobed_concentrator" in notice and "refused" in notice


def test_no_concentrator_wanted_gives_the_plain_spec_without_asking():
    for versions in (PACIFIC, TENTACLE):
        got, notice = rgw_service.plan_specs(rgw(kvceph_rgw_concentrator=None), versions, None)
        assert len(got) == 1 and notice is None
        assert "concentrator" not in got[0]["spec"]


def test_no_answer_from_the_dry_run_stops():
    with pytest.raises(rgw_service.SpecError, match="no answer"):
        rgw_service.plan_specs(rgw(**VIP), None, None)


def test_probe_spec_asks_about_the_keys_not_the_placement():
    probe = specs.probe_spec(rgw())
    assert probe["placement"] == {"count": 1}
    assert probe["spec"]["concentrator"] == "haproxy"


def test_spec_differences_compare_only_our_keys():
    wanted = {"placement": {"count_per_host": 4, "label": "rgw"}, "spec": {"port": 1}}
    current = {"placement": {"count_per_host": 4, "label": "rgw"}, "spec": {"port": 1, "x": 2}}
    assert spec_differences(wanted, {**current, "unmanaged": False}) == []
    current["placement"]["count_per_host"] = 2
    assert spec_differences(wanted, current) == ["placement.count_per_host"]
    assert spec_differences(wanted, {}) == ["placement", "spec"]


def test_ceph_hostname():
    assert rgw_service.ceph_hostname("ceph1", {}) == "ceph1"
    assert rgw_service.ceph_hostname("ceph1", {"kvceph_ceph_hostname": "node-a"}) == "node-a"
    with pytest.raises(OperationError, match="kvceph_ceph_hostname"):
        rgw_service.ceph_hostname("ceph1", {"kvceph_ceph_hostname": "bad name"})


# --- Validation by Ceph's own code (Debian's python3-ceph-common, Pacific schema) -------------

_VALIDATE = """
import json, sys, yaml
from ceph.deployment.service_spec import ServiceSpec
out = []
for text in json.load(sys.stdin):
    try:
        spec = ServiceSpec.from_json(yaml.safe_load(text))
        spec.validate()
        out.append("ok " + type(spec).__name__)
    except Exception as exc:
        out.append("error " + str(exc))
print(json.dumps(out))
"""


def _pacific_validate(wanted: list[dict]) -> list[str]:
    texts = [specs.dump(s) for s in wanted]
    probe = (
        subprocess.run(
            [str(SYSTEM_PYTHON), "-c", "import ceph.deployment.service_spec"],
            capture_output=True,
            timeout=30,
        )
        if SYSTEM_PYTHON.exists()
        else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("needs /usr/bin/python3 with python3-ceph-common (make deps installs it)")
    run = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", _VALIDATE],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(run.stdout)


def test_pacific_accepts_what_kvceph_sends_it():
    got, _ = rgw_service.plan_specs(rgw(**VIP), PACIFIC, REFUSED)
    plain, _ = rgw_service.plan_specs(rgw(kvceph_rgw_concentrator=None), PACIFIC, None)
    (_, listed), _ = rgw_service.plan_specs(rgw(**VIPS), PACIFIC, REFUSED)
    assert _pacific_validate(got + plain + [listed]) == [
        "ok RGWSpec",
        "ok IngressSpec",
        "ok RGWSpec",
        "ok IngressSpec",
    ]
    # and Pacific's schema refuses both keys at once, as kvceph's settings do
    both = {**listed, "spec": {**listed["spec"], "virtual_ip": "10.67.67.100/24"}}
    (result,) = _pacific_validate([both])
    assert "Single and multiple virtual IPs specified" in result


def test_pacific_would_reject_the_concentrator_spec():
    # The same words the real 20.2.4 mgr answered the dry run with (REFUSED).
    got, _ = rgw_service.plan_specs(rgw(), IBM_81, ACCEPTED)
    (result,) = _pacific_validate(got)
    assert "unexpected keyword argument 'concentrator'" in result


# --- TLS on the ingress (kvceph_rgw_ingress_ssl_pem): the key is compared by hash only --------


@pytest.fixture
def tls_pem(tmp_path):
    """A certificate + key PEM as lab/tls/make-cert.sh writes it (a throwaway CA in tmp_path)."""
    script = Path(__file__).resolve().parents[2] / "lab" / "tls" / "make-cert.sh"
    subprocess.run(
        [str(script), str(tmp_path), "s3", "DNS:s3.test", "IP:10.67.67.100"],
        check=True,
        timeout=60,
    )
    return tmp_path / "s3.pem"


def test_ingress_with_tls_carries_the_certificate_but_never_the_key(tls_pem):
    r = rgw(**VIP, kvceph_rgw_ingress_ssl_pem=str(tls_pem), kvceph_rgw_ingress_frontend_port=443)
    key = r.ingress_ssl_key.reveal()
    assert "PRIVATE KEY" in key and repr(r.ingress_ssl_key) == "'***'"
    wanted, _ = rgw_service.plan_specs(r, PACIFIC, REFUSED)
    assert all("PRIVATE KEY" not in specs.dump(s) for s in wanted)
    ingress = wanted[1]["spec"]
    assert ingress["ssl"] is True and ingress["frontend_port"] == 443
    assert ingress["ssl_cert"] == tls_pem.with_suffix(".crt").read_text()
    assert "ssl_key" not in ingress


def test_tls_pem_without_a_key_is_refused_naming_the_file(tmp_path, tls_pem):
    cert_only = tmp_path / "cert-only.pem"
    cert_only.write_text(tls_pem.with_suffix(".crt").read_text())
    with pytest.raises(SettingsError) as err:
        rgw(**VIP, kvceph_rgw_ingress_ssl_pem=str(cert_only))
    assert "kvceph_rgw_ingress_ssl_pem" in str(err.value)
    assert "1 certificate(s) and 0 private key(s)" in str(err.value)


def test_the_hosts_redaction_and_the_wanted_hash_agree(tls_pem):
    """What ceph_cli.redacted runs on the host turns the exported key into secret_hash(key)."""
    from deploys.cluster import ceph_cli

    key = tls_pem.with_suffix(".key").read_text()
    export = [{"service_type": "ingress", "spec": {"ssl_key": key, "ssl_cert": "x", "ssl": True}}]
    command = ceph_cli.redacted(
        ceph_cli.StringCommand("printf", "%s", ceph_cli.QuoteString(json.dumps(export)))
    )
    out = subprocess.run(
        ["sh", "-c", command.get_raw_value()], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "PRIVATE KEY" not in out.stdout
    (seen,) = json.loads(out.stdout)
    assert seen["spec"]["ssl_key"] == ceph_cli.secret_hash(key)
    assert seen["spec"]["ssl_cert"] == "x"
    # The exit status of the ceph command survives the filter; non-JSON passes unchanged.
    failed = ceph_cli.redacted(ceph_cli.StringCommand("echo", "No services reported;", "false"))
    out = subprocess.run(["sh", "-c", failed.get_raw_value()], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (1, "No services reported\n")


def test_an_orchestrator_that_never_answers_stops_in_one_line_naming_host_and_fix(monkeypatch):
    """Both mgrs stopped on the cephadm lab: `ceph orch status` killed by timeout (recorded)."""
    case = json.loads((FACTS / "ceph.CephOrchStatus" / "tentacle_no_mgr.json").read_text())
    me = settings.load(
        {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_ceph_command_timeout": 20},
        "ceph1",
        ["ceph_admin", "rgw"],
    )
    monkeypatch.setattr(rgw_service, "host", type("H", (), {"name": "ceph1"})())
    monkeypatch.setattr(rgw_service.memo, "read", lambda *a, **k: case["fact"])
    with pytest.raises(OperationError) as err:
        rgw_service._orchestrator(me, {})
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("ceph1: RGW service: `ceph orch status` gave no answer in 20 s")
    assert "nothing was changed" in line and "fix: on ceph1 check `ceph mgr stat`" in line
    # Not the "enable cephadm" advice a cluster without an orchestrator gets.
    assert "mgr module enable cephadm" not in line
