"""Keys set only where they have no effect: ``kvceph_ceph_pools`` in gpu group_data is never
read (only the ceph_admin host reads it), so it would be ignored and never validated.

Which host reads which key is taken from the settings code itself: each host's
:class:`~deploys.settings.reader.Reader` records the keys it looked up (``Reader.read``), so
no list is kept by hand. A key set on some hosts and read by none of them, while another host
of the inventory reads it with another value (or none), is refused in one line naming where
it acts: the operator expected an effect that does not happen. The same value on every host
(group_data/all.py) is not refused: it acts where it is read. A key read nowhere
(it depends on another setting, e.g. a model path under a hub source) is left alone: there is
no place to name, and refusing it would fire on group_data shared by every host.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from deploys.settings.reader import SettingsError

if TYPE_CHECKING:
    from deploys.settings import HostSettings


def _roles(h: HostSettings) -> str:
    roles = [
        g for g in ("ceph_admin", "gpu", "gaudi", "rgw", "monitoring", "router") if g in h.groups
    ]
    return "/".join(roles) or "no kvceph group"


def check(hosts: list[HostSettings]) -> None:
    """Refuse the first key set only on hosts that do not read it (one line: key, where it is
    set, where it acts, fix)."""
    given: dict[str, dict[str, str]] = {}
    for h in hosts:
        for key, value in h.given:
            given.setdefault(key, {})[h.host] = value
    by_name = {h.host: h for h in hosts}
    for key, values in sorted(given.items()):
        readers = [h for h in hosts if key in h.read_keys]
        if not readers:
            _refuse_without_group(hosts, key, values)
            continue
        acting = {values.get(h.host) for h in readers}
        ignored = [
            name
            for name, value in values.items()
            if key not in by_name[name].read_keys and value not in acting
        ]
        if not ignored:
            continue
        where = ", ".join(f"{h.host} ({_roles(h)})" for h in readers[:3])
        more = f" and {len(readers) - 3} more" if len(readers) > 3 else ""
        set_on = ", ".join(ignored[:3]) + (" ..." if len(ignored) > 3 else "")
        raise SettingsError(
            f"{set_on}: {key} is set where it has no effect (it acts on {where}{more} only): "
            "it would be ignored and never checked; fix: set it in the group_data of the hosts "
            "it acts on (or all.py)"
        )


# The subjects read on the hosts of one group only (settings/monitoring.py, settings/router.py):
# their keys are the kvceph_* literals of the module.
GROUP_MODULES = {"monitoring": "monitoring.py", "router": "router.py"}


@cache
def group_keys() -> dict[str, frozenset[str]]:
    """group -> the keys only that group's hosts read."""
    here = Path(__file__).resolve().parent
    return {
        group: frozenset(re.findall(r"[\"'](kvceph_[a-z0-9_]+)[\"']", (here / name).read_text()))
        for group, name in GROUP_MODULES.items()
    }


def _refuse_without_group(hosts: list[HostSettings], key: str, values: dict[str, str]) -> None:
    """A key of a group-only subject set while the inventory has no host of that group: no
    host reads it (the general rule above needs a reader to name)."""
    for group, keys in group_keys().items():
        if key in keys and not any(group in h.groups for h in hosts):
            set_on = ", ".join(sorted(values)[:3]) + (" ..." if len(values) > 3 else "")
            raise SettingsError(
                f"{set_on}: {key} is set but the inventory has no {group} host, the only hosts "
                f"that read it: it would be ignored and never checked; fix: add the {group} "
                "host to the inventory, or remove the key"
            )
