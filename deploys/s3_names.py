"""The bucket's name on inference hosts: every RGW address it must resolve to, and the checks
that the host's resolver returns them all (read before any host is touched).

LMCache's awscrt client resolves ``<bucket>.<rgw_dns_name>`` with getaddrinfo and spreads its
connections over every address it gets; an address it never gets takes no load and is no
fallback. glibc returns several /etc/hosts lines of one name only with ``multi on`` in
/etc/host.conf (Debian ships it; glibc's default is off).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

from deploys.settings import HostSettings
from deploys.settings.reader import SettingsError
from deploys.settings.s3 import FROM_RGW_GROUP

# Sections of the Resolution fact's output (deploys/facts/resolver.py).
HOST_CONF, HOSTS, GETENT, RC = "## host.conf", "## hosts", "## getent", "## rc "


@dataclass(frozen=True)
class Resolution:
    """What a host's resolver does with the bucket's name.

    + multi: /etc/host.conf says ``multi on`` (last ``multi`` line wins, as in glibc)
    + hosts_lines: kvceph's lines in /etc/hosts now (marker ``# kvceph``)
    + addresses: ``getent ahostsv4 <name>``'s addresses, in order, each once
    """

    multi: bool
    hosts_lines: tuple[str, ...]
    addresses: tuple[str, ...]


def host_conf_multi(lines: list[str]) -> bool:
    """glibc's ``multi`` flag from /etc/host.conf lines (res_hconf.c: off unless ``multi on``;
    keywords and values case-insensitive, ``#`` starts a comment, a later line wins)."""
    multi = False
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0].lower() == "multi":
            value = words[1].lower()
            if value.startswith("on"):
                multi = True
            elif value.startswith("off"):
                multi = False
    return multi


def getent_addresses(lines: list[str]) -> tuple[str, ...]:
    """The addresses of ``getent ahostsv4``/``ahosts`` output (one line per address and socket
    type: ``10.0.0.5      STREAM name``), in order, each once."""
    seen: dict[str, None] = {}
    for line in lines:
        words = line.split()
        if not words:
            continue
        try:
            ipaddress.ip_address(words[0])
        except ValueError:
            continue
        seen.setdefault(words[0], None)
    return tuple(seen)


def parse(output: list[str]) -> Resolution:
    """The Resolution fact's output (sections HOST_CONF, HOSTS, GETENT, RC) as a Resolution."""
    sections: dict[str, list[str]] = {HOST_CONF: [], HOSTS: [], GETENT: []}
    current = None
    for line in output:
        if line in sections:
            current = line
        elif line.startswith(RC):
            current = None
        elif current is not None:
            sections[current].append(line)
    marker = "# kvceph"
    return Resolution(
        multi=host_conf_multi(sections[HOST_CONF]),
        hosts_lines=tuple(x for x in sections[HOSTS] if x.rstrip().endswith(marker)),
        addresses=getent_addresses(sections[GETENT]),
    )


def refusal(me: HostSettings, seen: Resolution, wanted_lines: list[str]) -> str | None:
    """One line naming the host and the fix when its resolver would not return every address
    of ``me.s3.endpoint_ips``; None when it does (or cannot be told before the write).

    + me: the host's settings
    + seen: its Resolution fact
    + wanted_lines: the /etc/hosts lines this run writes (``render.hosts_lines``)
    """
    ips, name = me.s3.endpoint_ips, me.s3.bucket_host
    if not ips:
        return None
    source = me.s3.endpoint_ips_source
    key = source if source.startswith("kvceph_s3_endpoint_ip") else "kvceph_s3_endpoint_ips"
    if me.s3.wildcard_dns:
        missing = [ip for ip in ips if ip not in seen.addresses]
        if missing:
            got = ", ".join(seen.addresses) or "no address"
            return (
                f"{me.host}: {key} = {_shown(me)}: DNS answers {name} with "
                f"{got}, without {', '.join(missing)} (kvceph_s3_wildcard_dns True); fix: add "
                f"every address to the DNS record of *.{me.s3.endpoint_host}, or list only "
                "the addresses it holds"
            )
        return None
    if len(ips) > 1 and not seen.multi:
        return (
            f"{me.host}: {key} = {_shown(me)}: /etc/host.conf on {me.host} "
            f"has no 'multi on', so its resolver returns only the first /etc/hosts line of "
            f"{name} and the other addresses take no load; fix: add the line 'multi on' to "
            f"/etc/host.conf on {me.host} (Debian's default), or give one address"
        )
    # Our lines are already written: what the resolver answers now is what the engine gets.
    if tuple(wanted_lines) == seen.hosts_lines and set(seen.addresses) != set(ips):
        got = ", ".join(seen.addresses) or "no address"
        return (
            f"{me.host}: {key} = {_shown(me)}: /etc/hosts holds them but "
            f"the resolver answers {name} with {got}; fix: put 'files' first on the 'hosts:' "
            f"line of /etc/nsswitch.conf on {me.host}"
        )
    return None


def fill_rgw_group(hosts: dict[str, HostSettings], rgw_addresses: list[str]):
    """Hosts whose addresses default to every rgw host (the concentrator) get them.

    + hosts: every host's settings
    + rgw_addresses: the ``ssh_hostname`` (else name) of each host of the inventory's rgw group
    """
    out = dict(hosts)
    for name, me in hosts.items():
        if me.s3.endpoint_ips or me.s3.endpoint_ips_source != FROM_RGW_GROUP:
            continue
        bad = [a for a in rgw_addresses if not _is_ip(a)]
        if not rgw_addresses or bad:
            why = f"rgw hosts {', '.join(bad)} are named, not addressed" if bad else "no rgw group"
            raise SettingsError(
                f"{name}: kvceph_s3_endpoint_ips = None: defaults to every rgw host's address "
                f"(concentrator), but the inventory has {why}; fix: list the addresses in "
                "kvceph_s3_endpoint_ips"
            )
        s3 = dataclasses.replace(me.s3, endpoint_ips=tuple(dict.fromkeys(rgw_addresses)))
        out[name] = dataclasses.replace(me, s3=s3)
    return out


def _shown(me: HostSettings) -> str:
    ips = me.s3.endpoint_ips
    return repr(ips[0]) if me.s3.endpoint_ips_source == "kvceph_s3_endpoint_ip" else repr(list(ips))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def plan_lines(hosts: dict[str, HostSettings]) -> list[str]:
    """One plan line per distinct set of addresses: which, from where, on which hosts."""
    groups: dict[tuple, list[str]] = {}
    for name, me in hosts.items():
        if me.is_inference and me.s3.endpoint_ips:
            key = (me.s3.bucket_host, me.s3.endpoint_ips, me.s3.endpoint_ips_source)
            groups.setdefault(key, []).append(name)
    lines = []
    for (bucket_host, ips, source), names in groups.items():
        how = "DNS must answer with" if hosts[names[0]].s3.wildcard_dns else "/etc/hosts:"
        lines.append(
            f"kvceph: S3 name {bucket_host} {how} {', '.join(ips)} ({source}): {', '.join(names)}"
        )
    return lines
