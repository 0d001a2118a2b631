"""The plugin's settings: the kvceph.* keys of LMCache's extra_config, read and checked.

Torch-free, so the lab engine (LMCache without torch) reads them exactly as the plugin does.
"""

from __future__ import annotations

from typing import NamedTuple

from kvceph_connector.s3core import S3Config

#: The extra_config keys the plugin reads (``kvceph.<name>``) and their defaults.
KEYS = {
    "endpoint": None,
    "region": "us-east-1",
    "tls": True,
    "connections": 16,
    "timeout_s": 5.0,
    "min_hit_tokens": 0,
    "skip_short_puts": False,
    "receive_dir": None,
    "refresh_s": 60.0,
    "verify_crc32c": True,
    "namespace": "",  # "kv/<fields>/": the names' folder (deploys/settings/namespace.py)
}


def boolean(label: str, value) -> bool:
    """A bool from YAML or JSON (true/false, 1/0, yes/no, any case); ValueError naming ``label``.

    + label: the setting as the operator wrote it (``kvceph.tls``, ``... adapter_params.tls``)
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{label} must be true or false, not {value!r}")


def number(label: str, value, kind, minimum):
    """``kind(value)``, at least ``minimum``; ValueError naming ``label`` otherwise."""
    try:
        got = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, not {value!r}") from None
    if got < minimum:
        raise ValueError(f"{label} must be >= {minimum}, not {value!r}")
    return got


def _bool(name: str, value) -> bool:
    return boolean(f"kvceph.{name}", value)


def _number(name: str, value, kind, minimum):
    return number(f"kvceph.{name}", value, kind, minimum)


class PluginSettings(NamedTuple):
    """What the plugin reads from extra_config; its repr (S3Config's) holds no secret key."""

    s3: S3Config
    min_hit_tokens: int  # lookups whose hit is shorter report 0 (the crossover)
    skip_short_puts: bool  # no PUT for chunks seen only in lookups below it (admission.py)


def settings_from_extra(extra: dict | None) -> PluginSettings:
    """The core's S3Config, min_hit_tokens and skip_short_puts from LMCache's extra_config.

    + extra: config.extra_config (kvceph.* keys; unknown kvceph.* keys are an error).
    """
    extra = extra or {}
    unknown = sorted(
        k for k in extra if k.startswith("kvceph.") and k.removeprefix("kvceph.") not in KEYS
    )
    if unknown:
        raise ValueError(
            f"unknown extra_config key {unknown[0]}: kvceph reads {', '.join(sorted(KEYS))}"
        )
    if bool(extra.get("save_chunk_meta", False)):
        raise ValueError("save_chunk_meta must be false for kvceph's connector")
    got = {k: extra.get(f"kvceph.{k}", d) for k, d in KEYS.items()}
    if not got["endpoint"]:
        raise ValueError("kvceph.endpoint is required ('<bucket>.<rgw_dns_name>[:port]')")
    config = S3Config(
        endpoint=str(got["endpoint"]),
        region=str(got["region"]),
        tls=_bool("tls", got["tls"]),
        connections=_number("connections", got["connections"], int, 1),
        timeout_s=_number("timeout_s", got["timeout_s"], float, 0.1),
        receive_dir=str(got["receive_dir"]) if got["receive_dir"] else None,
        refresh_s=_number("refresh_s", got["refresh_s"], float, 0),
        verify_crc32c=_bool("verify_crc32c", got["verify_crc32c"]),
        namespace=str(got["namespace"] or ""),
    )
    return PluginSettings(
        config,
        _number("min_hit_tokens", got["min_hit_tokens"], int, 0),
        _bool("skip_short_puts", got["skip_short_puts"]),
    )
