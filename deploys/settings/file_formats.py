"""Values kvceph writes into files on the hosts: one check per file format, naming the key.

A setting that lands in an INI, env, YAML, hosts or unit file must not carry what ends or
splits an entry of that format: a newline in ``kvceph_s3_region`` would add an ``endpoint``
line to the INI that holds the S3 keys. The renderer quotes what it can; this module refuses,
before any host is touched, what no quoting can carry, naming the setting rather than the
template. :data:`RENDERED` says which settings land in which formats (tests/unit/
test_file_formats.py renders every file with a marker in each string setting and checks the
table against what the renderer actually writes). Pure: no pyinfra state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """A file format: what it calls itself, where kvceph writes it, and what its values may
    not hold."""

    name: str
    files: str
    forbidden: Mapping[str, str]  # character -> its name in the message
    edges: bool = False  # leading/trailing whitespace is lost (INI strips values)


_LINE = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL"}

INI = Format("INI", "~/.aws/config and the admin host's S3 INI", _LINE, edges=True)
# EnvironmentFile= values are double-quoted and escaped by the renderer: only the line end is
# left, and systemd refuses NUL.
ENV = Format("env", "the engine's env file", _LINE)
# Values are JSON-quoted, so a YAML delimiter inside one is text; LMCache and the connector
# pass these strings to awscrt and paths as they are, where a line end is never meant.
YAML = Format("YAML", "lmcache.yaml", _LINE)
# /etc/hosts splits on blanks and ends the line at '#'.
HOSTS = Format(
    "hosts", "/etc/hosts", {**_LINE, " ": "a space", "\t": "a tab", "#": "a '#' (a comment)"}
)
# ExecStart= words are quoted by the renderer (render.systemd_quote); a line end ends the key.
UNIT = Format("unit", "the engine's systemd unit", _LINE)

# Each setting whose value (its strings, in lists and dict values and keys alike) is written
# into a file, and the formats it lands in. A dotted name reads into a dict setting.
RENDERED: dict[str, tuple[Format, ...]] = {
    "kvceph_s3_region": (INI, YAML),
    "kvceph_s3_endpoint": (INI, YAML),
    "kvceph_s3_admin_endpoint": (INI,),
    "kvceph_s3_profile": (INI, ENV),
    "kvceph_rgw_dns_name": (HOSTS, YAML),
    "kvceph_s3_bucket": (HOSTS, YAML),
    "kvceph_s3_endpoint_ip": (HOSTS,),
    "kvceph_s3_endpoint_ips": (HOSTS,),
    "kvceph_model": (UNIT,),
    "kvceph_model_path": (UNIT,),
    "kvceph_model_revision": (UNIT,),
    "kvceph_service_user": (UNIT,),
    "kvceph_service_home": (UNIT, ENV),
    "kvceph_engine_profile.extra_args": (UNIT,),
    "kvceph_engine_profile.executable": (UNIT,),
    "kvceph_engine_profile.server_executable": (UNIT,),
    "kvceph_engine_profile.vllm_version": (UNIT, ENV),
    "kvceph_engine_profile.lmcache_version": (ENV, YAML),
    "kvceph_lmcache_hash_algorithm": (YAML,),
    "kvceph_engine_profile.env": (ENV,),
    "kvceph_extra_env": (ENV,),
    "kvceph_vllm_open_networks": (ENV,),
    "kvceph_lmcache_extra_config": (YAML,),
    "kvceph_connector_receive_dir": (YAML,),
}


def strings(value, shown=None) -> Iterator[tuple[str, str]]:
    """(what the message shows, string) for every string inside ``value``: itself, list items,
    dict keys and values. A dict value is shown by its key: env values may be secret-like."""
    if isinstance(value, str):
        yield (value if shown is None else shown), value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v, shown=str(k))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item, shown)


def problem(fmt: Format, text: str) -> str | None:
    """Why ``text`` cannot be written as a value of ``fmt``, or None."""
    for char, what in fmt.forbidden.items():
        if char in text:
            return f"holds {what}, which {fmt.files} ({fmt.name}) cannot carry in a value"
    if fmt.edges and text != text.strip():
        return f"has leading/trailing whitespace, which {fmt.files} ({fmt.name}) drops"
    return None


def _value(r, key: str):
    name, _, field = key.partition(".")
    value = r.peek(name, None)
    if field:
        value = value.get(field) if isinstance(value, Mapping) else None
    return value


def check(r) -> None:
    """Refuse the first rendered setting of one host that its file format cannot carry.

    + r: the host's settings reader (deploys/settings/reader.py ``Reader``)
    """
    for key, formats in RENDERED.items():
        for shown, text in strings(_value(r, key)):
            for fmt in formats:
                why = problem(fmt, text)
                if why:
                    why = why if shown == text else f"its value {why}"
                    raise r.fail(key, shown, why, "write the value on one line, without it")
