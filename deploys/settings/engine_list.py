"""Settings of the engines on one host (``kvceph_engines``) and of the restart roll
(``kvceph_restart_batch``).

One module of the settings package (one per subject); ``settings.load`` calls
``load`` here and puts the engines in ``EngineSettings.engines``; ``check_inventory``
calls ``check_roll``. Pure: no pyinfra state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The engine the default inventory runs: today's ``vllm.service`` on every accelerator.
DEFAULT_NAME = "vllm"
_NAME = r"[a-z0-9][a-z0-9-]{0,30}"
_KEYS = {"name", "devices", "port"}
# Which variable limits an engine to its devices (the runtime's own, read before it starts).
DEVICE_VARIABLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "gaudi": "HABANA_VISIBLE_MODULES"}
WHOLE_GROUP_OPT_IN = "kvceph_restart_whole_group"


@dataclass(frozen=True)
class Engine:
    """One vLLM process on a host: its own unit, env file, devices and port."""

    name: str
    devices: tuple[int, ...] | None  # None: every accelerator (no device variable is set)
    port: int

    @property
    def unit(self) -> str:
        # The default engine keeps today's unit name, so existing hosts keep their files.
        return "vllm.service" if self.name == DEFAULT_NAME else f"vllm-{self.name}.service"

    @property
    def env_name(self) -> str:
        return "vllm.env" if self.name == DEFAULT_NAME else f"vllm-{self.name}.env"


def load(r, default_port: int, tensor_parallel_size: int, count: int | None) -> tuple[Engine, ...]:
    """``kvceph_engines`` of one host, checked: names, devices and ports unique, devices
    within ``kvceph_accelerator_count``, at least ``kvceph_tensor_parallel_size`` devices each.

    + r: the host's settings reader (deploys/settings/reader.py ``Reader``)
    + default_port: ``kvceph_vllm_port``, the default engine's port
    """
    key = "kvceph_engines"
    raw = r.list(key, [{"name": DEFAULT_NAME, "port": default_port}])
    if not raw:
        raise r.fail(key, raw, "lists no engine", "list at least one engine, or remove the key")
    engines: list[Engine] = []
    for i, item in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            raise r.fail(where, item, "must be a dict", "use {'name': ..., 'devices': [...], ...}")
        unknown = set(item) - _KEYS
        if unknown:
            raise r.fail(where, sorted(unknown), "unknown engine keys", "use name, devices, port")
        name = item.get("name")
        if not isinstance(name, str) or not re.fullmatch(_NAME, name):
            raise r.fail(f"{where}.name", name, f"must match {_NAME}", "use e.g. 'engine-a'")
        port = item.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise r.fail(f"{where}.port", port, "must be a port 1..65535", "e.g. 8001")
        devices = _devices(r, f"{where}.devices", item.get("devices"), count)
        engines.append(Engine(name, devices, port))
    _check_host(r, key, engines, tensor_parallel_size)
    return tuple(engines)


def _devices(r, where: str, value, count: int | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise r.fail(where, value, "must be a non-empty list of device indexes", "e.g. [0, 1]")
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in value):
        raise r.fail(where, value, "device indexes are whole numbers >= 0", "e.g. [0, 1]")
    if count is None:
        raise r.fail(
            "kvceph_accelerator_count",
            None,
            f"{where} lists devices but the host's accelerator count is unknown",
            "set kvceph_accelerator_count for the host",
        )
    outside = [d for d in value if d >= count]
    if outside:
        raise r.fail(
            where,
            list(value),
            f"device(s) {outside} outside the host's {count} accelerators (0..{count - 1})",
            "use indexes below kvceph_accelerator_count",
        )
    if len(set(value)) != len(value):
        raise r.fail(where, list(value), "lists a device twice", "list each device once")
    return tuple(value)


def _check_host(r, key: str, engines: list[Engine], tp: int) -> None:
    seen_names: set[str] = set()
    ports: dict[int, str] = {}
    claimed: dict[int, str] = {}
    for e in engines:
        if e.name in seen_names:
            raise r.fail(key, e.name, "engine name used twice", "give every engine its own name")
        seen_names.add(e.name)
        if e.port in ports:
            raise r.fail(
                key,
                e.port,
                f"port used by engines {ports[e.port]} and {e.name}",
                "give every engine its own port",
            )
        ports[e.port] = e.name
        if e.devices is None:
            if len(engines) > 1:
                raise r.fail(
                    key,
                    e.name,
                    "engine without devices on a host with several engines (it would take "
                    "every accelerator)",
                    "list the devices of every engine",
                )
            continue
        if tp > len(e.devices):
            raise r.fail(
                key,
                e.name,
                f"kvceph_tensor_parallel_size {tp} exceeds its {len(e.devices)} device(s) "
                f"{list(e.devices)}",
                "give the engine at least as many devices as the tensor-parallel size",
            )
        for d in e.devices:
            if d in claimed:
                raise r.fail(
                    key,
                    e.name,
                    f"device {d} also belongs to engine {claimed[d]}",
                    "give every engine its own devices",
                )
            claimed[d] = e.name


# --- The restart roll ---------------------------------------------------------------------------


def restart_batch(r) -> int | str:
    """``kvceph_restart_batch``: a count (>= 1) or a percentage string ``"25%"``."""
    key = "kvceph_restart_batch"
    value = r.raw(key, 1)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"(\d{1,3})%", value)
        if m and 1 <= int(m.group(1)) <= 100:
            return value
    raise r.fail(key, value, "must be a count >= 1 or a percentage '1%'..'100%'", "e.g. 2 or '25%'")


def batch_size(batch: int | str, engines: int) -> int:
    """Engines per batch: the count, or the percentage of ``engines`` (rounded down, >= 1)."""
    if isinstance(batch, int):
        return batch
    return max(1, math.floor(engines * int(batch[:-1]) / 100))


def roll_refusal(batch: int | str, whole_group: bool, groups: Mapping[str, int]) -> str | None:
    """A one-line refusal when a batch could take every engine of a cache group down at once.

    + groups: cache group label -> its number of engines (all hosts of the inventory)

    A group of one engine is always down while it restarts, whatever the batch: not refused.
    """
    if whole_group:
        return None
    total = sum(groups.values())
    size = batch_size(batch, total)
    for label, count in groups.items():
        if count > 1 and size >= count:
            return (
                f"inventory: kvceph_restart_batch = {batch!r}: {size} engines at a time would "
                f"restart all {count} engines of cache group {label} at once (no engine of the "
                f"group serves meanwhile); fix: lower the batch below {count}, or set "
                f"{WHOLE_GROUP_OPT_IN} = True to accept it"
            )
    return None
