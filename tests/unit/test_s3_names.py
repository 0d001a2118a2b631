"""The bucket name's addresses: settings, defaults, the plan line, and the resolver checks
against real outputs of the Resolution fact's command.

The fixtures are that command's output on Debian 12 (glibc 2.36), recorded with
``unshare -m`` bind-mounting an /etc/hosts with two kvceph lines of ``lmcache.s3.kvlab`` and an
/etc/host.conf saying ``multi on``, ``multi off`` or nothing (glibc's default: off); and an
/etc/hosts without them (``getent`` exits 2). The ``ipv6-*`` ones likewise with two IPv6
lines (Debian 12, glibc 2.36, ``unshare -rm``): the fact with family "6", and with the IPv4
lookup that used to be run for every list (it finds nothing).
"""

from pathlib import Path

import pytest

from deploys import render, s3_names
from deploys import settings as s
from deploys.facts.resolver import Resolution
from deploys.settings.reader import SettingsError
from deploys.settings.s3 import FROM_RGW_GROUP, FROM_VIP

FIXTURES = Path(__file__).parent / "fixtures" / "resolver"
TWO = ["10.213.10.100", "10.213.10.101"]
LAB = {
    "kvceph_rgw_dns_name": "s3.kvlab",
    "kvceph_s3_endpoint": "https://s3.kvlab:443",
    "kvceph_rgw_managed_by": "external",
}


def fact(name: str) -> s3_names.Resolution:
    return Resolution().process((FIXTURES / name).read_text().splitlines())


def gpu(host="gpu1", **data):
    return s.load({**LAB, **data}, host, ("gpu",))


def test_recorded_outputs_parse():
    on = fact("two-lines-multi-on.txt")
    assert on.multi is True and on.addresses == tuple(TWO)
    assert len(on.hosts_lines) == 2
    off = fact("two-lines-multi-off.txt")
    assert off.multi is False and off.addresses == (TWO[0],)  # glibc: the first line only
    empty = fact("two-lines-multi-empty.txt")
    assert empty.multi is False and empty.addresses == (TWO[0],)
    none = fact("no-lines.txt")
    assert none.multi is True and none.addresses == () and none.hosts_lines == ()


@pytest.mark.parametrize(
    "lines,multi",
    [
        (["multi on"], True),
        (["MULTI On  # Debian"], True),
        (["multi on", "multi off"], False),
        (["# multi on"], False),
        (["order hosts,bind", "multi"], False),
        ([], False),
    ],
)
def test_host_conf_multi_as_glibc_reads_it(lines, multi):
    assert s3_names.host_conf_multi(lines) is multi


def test_one_address_key_is_a_list_of_one_and_both_keys_are_refused():
    assert gpu(kvceph_s3_endpoint_ip="10.0.0.5").s3.endpoint_ips == ("10.0.0.5",)
    me = gpu(kvceph_s3_endpoint_ips=TWO)
    assert (
        me.s3.endpoint_ips == tuple(TWO) and me.s3.endpoint_ips_source == "kvceph_s3_endpoint_ips"
    )
    with pytest.raises(SettingsError, match="kvceph_s3_endpoint_ips = .*together with"):
        gpu(kvceph_s3_endpoint_ip="10.0.0.5", kvceph_s3_endpoint_ips=TWO)


def test_cephadm_defaults_the_ingress_vip_else_every_rgw_host():
    vip = gpu(kvceph_rgw_managed_by="cephadm", kvceph_rgw_ingress_virtual_ip="10.0.0.100/24")
    assert vip.s3.endpoint_ips == ("10.0.0.100",) and vip.s3.endpoint_ips_source == FROM_VIP
    # several VIPs (one per rgw host): the engines get every one of them
    vips = ["10.0.0.100/24", "10.0.0.101/24"]
    many = gpu(kvceph_rgw_managed_by="cephadm", kvceph_rgw_ingress_virtual_ips=vips)
    assert many.s3.endpoint_ips == ("10.0.0.100", "10.0.0.101")
    assert many.s3.endpoint_ips_source == FROM_VIP
    conc = gpu(kvceph_rgw_managed_by="cephadm")
    assert conc.s3.endpoint_ips == () and conc.s3.endpoint_ips_source == FROM_RGW_GROUP
    filled = s3_names.fill_rgw_group({"gpu1": conc}, ["10.0.0.11", "10.0.0.12"])
    assert filled["gpu1"].s3.endpoint_ips == ("10.0.0.11", "10.0.0.12")
    with pytest.raises(SettingsError, match="gpu1: .*rgw hosts ceph1 are named, not addressed"):
        s3_names.fill_rgw_group({"gpu1": conc}, ["ceph1"])
    with pytest.raises(SettingsError, match="no rgw group; fix: list the addresses"):
        s3_names.fill_rgw_group({"gpu1": conc}, [])


def test_plan_line_names_addresses_source_and_hosts():
    hosts = {n: gpu(n, kvceph_s3_endpoint_ips=TWO) for n in ("gpu1", "gpu2")}
    assert s3_names.plan_lines(hosts) == [
        "kvceph: S3 name lmcache.s3.kvlab /etc/hosts: 10.213.10.100, 10.213.10.101 "
        "(kvceph_s3_endpoint_ips): gpu1, gpu2"
    ]


def test_multi_off_is_refused_naming_host_and_fix():
    me = gpu(kvceph_s3_endpoint_ips=TWO)
    for name in ("two-lines-multi-off.txt", "two-lines-multi-empty.txt"):
        line = s3_names.refusal(me, fact(name), render.hosts_lines(me))
        assert line.startswith("gpu1: kvceph_s3_endpoint_ips = ['10.213.10.100', '10.213.10.101']")
        assert "fix: add the line 'multi on' to /etc/host.conf on gpu1" in line
    assert s3_names.refusal(me, fact("two-lines-multi-on.txt"), render.hosts_lines(me)) is None
    assert s3_names.refusal(me, fact("no-lines.txt"), render.hosts_lines(me)) is None


def test_written_lines_the_resolver_does_not_return_are_refused():
    me = gpu(kvceph_s3_endpoint_ips=TWO)
    on = fact("two-lines-multi-on.txt")
    # /etc/hosts holds our two lines, the resolver answers from elsewhere (nsswitch: dns first)
    other = s3_names.Resolution(True, on.hosts_lines, ("10.9.9.9",))
    line = s3_names.refusal(me, other, list(on.hosts_lines))
    assert "the resolver answers lmcache.s3.kvlab with 10.9.9.9" in line
    assert "fix: put 'files' first on the 'hosts:' line of /etc/nsswitch.conf on gpu1" in line


def test_wildcard_dns_must_answer_every_address():
    me = gpu(kvceph_s3_wildcard_dns=True, kvceph_s3_endpoint_ips=TWO)
    assert render.hosts_lines(me) == []
    assert s3_names.refusal(me, fact("two-lines-multi-on.txt"), []) is None
    line = s3_names.refusal(me, fact("two-lines-multi-off.txt"), [])
    assert "DNS answers lmcache.s3.kvlab with 10.213.10.100, without 10.213.10.101" in line
    assert "fix: add every address to the DNS record of *.s3.kvlab" in line
    assert "no address" in s3_names.refusal(me, fact("no-lines.txt"), [])
    # wildcard DNS without addresses: nothing to check (as before)
    assert gpu(kvceph_s3_wildcard_dns=True).s3.endpoint_ips == ()


def test_plan_line_says_why_the_default_was_chosen():
    vip = gpu(kvceph_rgw_managed_by="cephadm", kvceph_rgw_ingress_virtual_ip="10.0.0.100/24")
    (line,) = s3_names.plan_lines({"gpu1": vip})
    assert line.startswith("kvceph: S3 name lmcache.s3.kvlab /etc/hosts: 10.0.0.100 (default: ")
    assert "keepalived keeps each on a live rgw host" in line and line.endswith("): gpu1")
    conc = s3_names.fill_rgw_group(
        {"gpu1": gpu(kvceph_rgw_managed_by="cephadm")}, ["10.0.0.11", "10.0.0.12"]
    )
    (line,) = s3_names.plan_lines(conc)
    assert "10.0.0.11, 10.0.0.12 (default: every host of the rgw group, as each runs" in line


TWO6 = ["fd00:213::100", "fd00:213::101"]


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("kvceph_s3_endpoint_ip", "0.0.0.0", "0.0.0.0"),
        ("kvceph_s3_endpoint_ips", ["10.0.0.5", "224.0.0.251"], "224.0.0.251"),
        ("kvceph_s3_endpoint_ips", ["ff02::1"], "ff02::1"),
        ("kvceph_s3_endpoint_ips", ["::"], "::"),
        ("kvceph_s3_endpoint_ip", "255.255.255.255", "255.255.255.255"),
    ],
)
def test_an_address_no_host_can_connect_to_is_refused(key, value, shown):
    with pytest.raises(SettingsError) as caught:
        gpu(**{key: value})
    assert str(caught.value) == (
        f"gpu1: {key} = {shown!r}: is not an address a host can connect to (unspecified, "
        "multicast or broadcast); fix: give the address an RGW (or its haproxy) listens on"
    )


def test_a_list_mixing_families_is_refused_with_its_cause():
    with pytest.raises(SettingsError) as caught:
        gpu(kvceph_s3_endpoint_ips=[TWO[0], TWO6[0]])
    assert str(caught.value) == (
        "gpu1: kvceph_s3_endpoint_ips = ['10.213.10.100', 'fd00:213::100']: mixes IPv4 and "
        "IPv6: LMCache's S3 client (awscrt) takes the addresses of each family apart, so kvceph "
        "can neither spread the load over the whole list nor check before the deploy that the "
        "resolver returns it; fix: list the RGW addresses of one family (all IPv4, or all IPv6)"
    )


def test_an_ipv6_list_is_checked_with_the_ipv6_lookup():
    from deploys import preflight

    me = gpu(kvceph_s3_endpoint_ips=TWO6)
    six = fact("ipv6-two-lines-multi-on.txt")
    assert six.addresses == tuple(TWO6) and six.multi is True
    assert list(six.hosts_lines) == render.hosts_lines(me)
    assert s3_names.refusal(me, six, render.hosts_lines(me)) is None
    # The IPv4 lookup finds none of them: the wrong cause (nsswitch) the check used to give.
    four = fact("ipv6-two-lines-ahostsv4.txt")
    assert four.addresses == () and "nsswitch" in s3_names.refusal(me, four, render.hosts_lines(me))
    asked = []

    def resolution(host, name, family):
        asked.append(family)
        return six

    preflight.check_resolvers({"gpu1": me}, resolution)
    preflight.check_resolvers({"gpu1": gpu(kvceph_s3_endpoint_ips=TWO)}, resolution)
    assert asked == ["6", "4"]
    assert "getent ahostsv6" in Resolution().command("x", family="6").get_raw_value()
    assert "getent ahostsv4" in Resolution().command("x").get_raw_value()


def test_link_local_and_loopback_addresses_stay_accepted():
    assert gpu(kvceph_s3_endpoint_ip="127.0.0.1").s3.endpoint_ips == ("127.0.0.1",)
    assert gpu(kvceph_s3_endpoint_ips=["::1"]).s3.endpoint_ips == ("::1",)
    assert gpu(kvceph_s3_endpoint_ips=TWO6).s3.endpoint_ips == tuple(TWO6)
