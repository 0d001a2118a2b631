"""What an inference host's resolver makes of the bucket's name (deploys/s3_names.py)."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys import s3_names


class Resolution(FactBase):
    """
    /etc/host.conf's ``multi``, kvceph's /etc/hosts lines and ``getent ahostsv4 <name>``'s
    addresses (the lookup awscrt's getaddrinfo does), as an ``s3_names.Resolution``.

    + hostname: the bucket's virtual-host name, e.g. ``lmcache.s3.cephlab.com``
    + family: "4" (default) or "6", the family of kvceph_s3_endpoint_ips (one per list)
    """

    def command(self, hostname, family="4"):
        # getent exits 2 for an unknown name: an answer, not a failure of the fact.
        lookup = "ahostsv6" if family == "6" else "ahostsv4"
        script = (
            f"echo '{s3_names.HOST_CONF}'; cat /etc/host.conf 2>/dev/null; "
            f"echo '{s3_names.HOSTS}'; cat /etc/hosts 2>/dev/null; "
            f'echo \'{s3_names.GETENT}\'; getent {lookup} "$1"; echo "{s3_names.RC}$?"'
        )
        return StringCommand(
            "sh", "-c", QuoteString(script), "kvceph-resolution", QuoteString(hostname)
        )

    def process(self, output):
        return s3_names.parse(list(output))
