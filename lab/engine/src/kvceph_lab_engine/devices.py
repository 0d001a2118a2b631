"""Accelerators as vLLM sees them: the devices ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or
``HABANA_VISIBLE_MODULES`` (Gaudi) leave visible, and each engine's share of device memory,
so an engine that asks for more devices than it sees, or two engines on one device, fail to
start the way real vLLM does.

The lab has no accelerators: a host has ``KVCEPH_LAB_DEVICE_COUNT`` (default 8) emulated
devices; with ``KVCEPH_LAB_DEVICE_LEDGER`` set (the lab's engine profile sets it), every engine
records the memory share it holds on each device it uses in that directory (one file per
device and process; a dead process's files do not count).
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path

VARIABLES = ("CUDA_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES")
DEVICE_GIB = 80.0  # emulated memory of one device, for vLLM's message


class DeviceError(ValueError):
    """The engine cannot start on the devices it sees; the message is vLLM's."""


def visible(env=os.environ) -> list[int]:
    """Physical indexes of the devices the engine sees, in the order it numbers them."""
    count = int(env.get("KVCEPH_LAB_DEVICE_COUNT") or 8)
    for name in VARIABLES:
        value = env.get(name)
        if value is not None:
            try:
                found = [int(v) for v in value.split(",") if v.strip()]
            except ValueError:
                raise DeviceError(f"RuntimeError: {name}={value!r} is not a device list") from None
            # A device that does not exist is not visible (the runtime skips it).
            return [d for d in found if 0 <= d < count]
    return list(range(count))


def check_world(world: int, devices: list[int]) -> None:
    """vLLM's mp executor refuses a world size larger than the visible devices."""
    if world > len(devices):
        raise DeviceError(
            f"AssertionError: please set tensor_parallel_size ({world}) to less than max local "
            f"gpu count ({len(devices)})"
        )


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def claim(devices: list[int], utilization: float, env=os.environ) -> None:
    """Hold ``utilization`` of each device's memory, as vLLM's startup profiling does; refuse
    (vLLM's message) when other live engines already hold too much of one of them."""
    ledger = env.get("KVCEPH_LAB_DEVICE_LEDGER")
    if not ledger:
        return
    root = Path(ledger)
    root.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for d in devices:
            held = 0.0
            for f in root.glob(f"{d}.*"):
                other = int(f.suffix[1:])
                if other != pid and _alive(other):
                    held += float(f.read_text() or 0)
            free = (1.0 - held) * DEVICE_GIB
            if held + utilization > 1.0:
                raise DeviceError(
                    f"ValueError: Free memory on device cuda:{d} ({free:.2f}/{DEVICE_GIB:.2f} GiB) "
                    f"on startup is less than desired GPU memory utilization ({utilization}, "
                    f"{utilization * DEVICE_GIB:.2f} GiB). Decrease GPU memory utilization or "
                    "reduce GPU memory used by other processes."
                )
        files = [root / f"{d}.{pid}" for d in devices]
        for f in files:
            f.write_text(str(utilization))
    atexit.register(lambda: [f.unlink(missing_ok=True) for f in files])
