"""One check per kind of value, applied to every key of that kind: a path on the hosts, an
RGW uid, a size, a duration, a package spec, a URL, a name kvceph puts into a path.

Each subject module reads its keys through :class:`~deploys.settings.reader.Reader`, whose
typed getters call these checks, so a key gets its kind's check by the getter it is read with,
not by a rule written for it. A path key must also say how kvceph uses the directory
(:data:`PATH_USE`): the getter refuses a path key missing from the table, so the next path
key is classified before it can ship. Pure: no pyinfra state.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any

# --- Paths on the hosts --------------------------------------------------------------------------

# How kvceph uses a directory a setting names.
CHOWNED = "chowned"  # made the engine's (its HOME, its HF cache): owner, ReadWritePaths=
WRITTEN = "written"  # the engine writes files into it (the connector's receive directory)
INSTALLED = "installed"  # root creates it and writes kvceph's files in it (venvs, configs)

_WHAT = {
    CHOWNED: "kvceph chowns it to the engine's user and makes it writable in the unit",
    WRITTEN: "the engine writes into it (ReadWritePaths)",
    INSTALLED: "kvceph creates it and sets its mode",
}

#: Every path setting, and what kvceph does to its directory (Reader.path refuses others).
PATH_USE = {
    "kvceph_service_home": CHOWNED,
    "kvceph_hf_home": CHOWNED,
    "kvceph_connector_receive_dir": WRITTEN,
    "kvceph_venv": INSTALLED,
    "kvceph_router_venv": INSTALLED,
    "kvceph_model_dir": INSTALLED,
    "kvceph_prometheus_dir": INSTALLED,
    "kvceph_grafana_dashboards_dir": INSTALLED,
}

# Directories of the system itself: chowning one, making it writable for a service, or setting
# its mode hands (or takes) the system's files. Their subdirectories are fine for INSTALLED
# (the default Prometheus files live in /etc/prometheus/kvceph).
SYSTEM_DIRS = frozenset(
    "/ /bin /boot /dev /dev/shm /etc /etc/systemd /etc/systemd/system /home /lib /lib32 /lib64 "
    "/libx32 /media /mnt /opt /proc /root /run /sbin /srv /sys /tmp /usr /usr/bin /usr/lib "
    "/usr/local /usr/local/bin /usr/local/lib /usr/sbin /usr/share /var /var/cache /var/lib "
    "/var/log /var/run /var/spool /var/tmp /etc/prometheus /var/lib/grafana".split()
)
# Trees nothing of the engine's may live in: a directory there that the engine owns or writes
# lets it rewrite what root runs or reads (a root escalation for the engine).
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
    "/sbin", "/sys", "/usr",
)  # fmt: skip
# tmpfs the engine may write into (the connector's receive directory's documented place).
ENGINE_TMPFS = "/dev/shm"


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def path_problem(key: str, path: str) -> tuple[str, str] | None:
    """(why, fix) when ``path`` (an absolute, ``..``-free path) is no place for ``key``'s
    directory, else None. ``key`` must be in :data:`PATH_USE`."""
    use = PATH_USE[key]
    if path.endswith("/"):
        # kvceph derives names from it (<kvceph_venv>-<digest>): '/opt/v/' gives '/opt/v/-...'
        return "ends with '/'", f"write it without the trailing '/' ({path.rstrip('/') or '/'})"
    if path in SYSTEM_DIRS and not (use == WRITTEN and path == ENGINE_TMPFS):
        return (
            f"is a system directory, and {_WHAT[use]}",
            "use a directory of kvceph's own below it, e.g. " + _example(key),
        )
    if use == INSTALLED:
        return None
    tree = next((t for t in SYSTEM_TREES if _under(path, t)), None)
    if tree and not (use == WRITTEN and _under(path, ENGINE_TMPFS)):
        return (
            f"lies under {tree}, and {_WHAT[use]} (a root escalation for the engine)",
            "use a directory outside the system's trees, e.g. " + _example(key),
        )
    return None


def _example(key: str) -> str:
    return {
        "kvceph_service_home": "/var/lib/vllm",
        "kvceph_hf_home": "/data/hf",
        "kvceph_connector_receive_dir": "/dev/shm",
        "kvceph_venv": "/opt/kvceph/venv",
        "kvceph_router_venv": "/opt/kvceph/router",
        "kvceph_model_dir": "/var/lib/kvceph/models",
        "kvceph_prometheus_dir": "/etc/prometheus/kvceph",
        "kvceph_grafana_dashboards_dir": "/var/lib/grafana/dashboards/kvceph",
    }.get(key, "/var/lib/kvceph")


#: A name kvceph puts into a path or a label (a profile's name): no '/', no dot-only name.
PATH_WORD = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}"

# --- Accounts -------------------------------------------------------------------------------


def service_user_problem(user: str, login_user: Any) -> tuple[str, str] | None:
    """(why, fix) when the engine's account may not be ``user``: root, or the SSH login user
    (the stage sets its home and a nologin shell: the operator's own login would be locked out)."""
    if user == "root":
        return (
            "the engines would run as root, and the stage sets root's home and a nologin shell",
            "use an account of the engine's own, e.g. vllm",
        )
    if isinstance(login_user, str) and user == login_user:
        return (
            "is the SSH login user (ssh_user): the stage sets its home and a nologin shell, "
            "locking that login out of SSH",
            "use an account of the engine's own, e.g. vllm",
        )
    return None


def implicit_login_user(host: str, hostname: Any, config_file: Any) -> str | None:
    """The user pyinfra's SSH connector logs in as when ``ssh_user`` is unset: ssh_config's
    ``User`` for the host, else paramiko's default, the local user; None for other connectors.

    + host: the inventory name (``@local``, ``@docker/...`` use no SSH login)
    + hostname: the host's ``ssh_hostname`` (None: the inventory name)
    + config_file: the host's ``ssh_config_file`` (None: ~/.ssh/config)
    """
    import getpass

    from pyinfra.connectors.sshuserclient.client import get_ssh_config

    if host.startswith("@") and not host.startswith("@ssh/"):
        return None
    # The same lookup as SSHClient.parse_config: the file's User wins over the default.
    config = get_ssh_config(config_file)
    name = str(hostname or host.removeprefix("@ssh/"))
    user = config.lookup(name).get("user") if config else None
    return user or getpass.getuser()


# --- RGW identities ---------------------------------------------------------------------------

#: An RGW uid kvceph creates or uses: it lands in bucket-policy ARNs and radosgw-admin argv.
#: 64 characters at most, also once composed (``<kvceph_s3_user>-<cache group>``).
RGW_UID = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}"
RGW_UID_MAX = 64


def rgw_uid_problem(uid: str) -> tuple[str, str] | None:
    """(why, fix) when ``uid`` is no RGW uid kvceph can create and name in a policy."""
    if len(uid) > RGW_UID_MAX:
        return (
            f"is {len(uid)} characters; kvceph's RGW uids (also <kvceph_s3_user>-<group>) "
            f"take at most {RGW_UID_MAX}",
            "use a shorter uid",
        )
    if not re.fullmatch(RGW_UID, uid):
        return (
            "is not an RGW uid (a letter or digit first, then letters, digits, '_', '.', '-')",
            "use e.g. kvceph-s3-admin",
        )
    return None


# --- Sizes ----------------------------------------------------------------------------------

GIB = 1 << 30
# radosgw-admin takes --max-size (bytes) as a signed 64-bit integer.
RGW_MAX_BYTES = (1 << 63) - 1


def size_problem(value: Any, lo: float, hi: float, unit: str, hi_why: str) -> str | None:
    """Why ``value`` is no size in ``unit`` in [lo, hi] (finite, > 0), or None; ``hi_why``
    says what the upper bound is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a size in {unit} > 0"
    if isinstance(value, float) and not math.isfinite(value):
        return f"is not a finite number: a size in {unit} > 0 is"
    if value <= 0:
        return f"must be a size in {unit} > 0"
    if value < lo:
        small = f"{lo * 1024:g} MiB" if lo < 1 and unit == "GiB" else f"{lo:g} {unit}"
        return f"is below {small}: it rounds to a size that holds nothing"
    if value > hi:
        return f"is above {hi:g} {unit}, {hi_why}"
    return None


# --- Durations (Prometheus) -------------------------------------------------------------------

# Prometheus' duration (common/model ParseDuration): units largest first, each at most once.
DURATION = r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?"
_UNIT_MS = {"y": 365 * 86400_000, "w": 7 * 86400_000, "d": 86400_000, "h": 3600_000,
            "m": 60_000, "s": 1000, "ms": 1}  # fmt: skip
# promtool refuses a duration whose nanoseconds overflow int64 ("duration out of range").
_MAX_MS = ((1 << 63) - 1) // 1_000_000


def duration_ms(text: str) -> int | None:
    """Milliseconds of a Prometheus duration, None if it is not one (``""`` is not)."""
    if not text or not re.fullmatch(DURATION, text):
        return None
    return sum(int(n) * _UNIT_MS[u] for n, u in re.findall(r"(\d+)(ms|[ywdhms])", text))


def duration_problem(text: str, lo_ms: int) -> str | None:
    """Why ``text`` is no Prometheus duration of at least ``lo_ms``, or None."""
    ms = duration_ms(text)
    if ms is None:
        return "is not a Prometheus duration"
    if ms > _MAX_MS:
        return "is out of range for Prometheus (promtool refuses it: over 292 years)"
    if ms < lo_ms:
        return f"is below {lo_ms // 1000}s (Prometheus would scrape the exporters in a loop)"
    return None


# --- Addresses: ingress VIPs -------------------------------------------------------------------


def vip_problem(text: str) -> str | None:
    """Why ``text`` (an IP/prefix that parses) is no VIP keepalived can hold, or None: cephadm
    picks the interface from the prefix's subnet, and a subnet's own network or broadcast
    address is no host address."""
    if "/" not in text:
        return "has no prefix (cephadm picks the interface from the VIP's subnet)"
    iface = ipaddress.ip_interface(text)
    net = iface.network
    if net.num_addresses > 2 and iface.ip in (net.network_address, net.broadcast_address):
        return f"is the network or broadcast address of {net}, not a host address"
    return None


# --- Package specs (pip) ----------------------------------------------------------------------

#: What a profile's ``packages`` entry may be: an exact pin (the lock and the venv's digest
#: are made from the pins; the engine-software stage installs nothing else).
PIN = r"([A-Za-z0-9][A-Za-z0-9_.\-]*)==([A-Za-z0-9_.+!\-]+)"


def package_problem(spec: str) -> str | None:
    """Why ``spec`` is not a ``name==version`` pin kvceph can lock and install, or None."""
    if spec.startswith("-"):
        return "is a pip option, not a package (pip would take it as an argument)"
    if "://" in spec or spec.startswith(("file:", "/", ".")) or " @ " in spec:
        return "is a direct URL or path, not a pinned package (nothing locks or checks it)"
    if not re.fullmatch(PIN, spec):
        return "is not pinned as name==version (a range installs whatever pip picks)"
    return None


# --- URLs -----------------------------------------------------------------------------------


def url_problem(url: str) -> str | None:
    """Why ``url`` is no http(s) URL pip can take as one argument, or None."""
    if re.search(r"\s", url):
        return "holds whitespace (pip would take the rest as another argument)"
    if not re.fullmatch(r"https?://[^/\s?#]+(/\S*)?", url):
        return "is not an http(s) URL"
    return None
