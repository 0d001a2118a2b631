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
