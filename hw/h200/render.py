"""Render one H200 configuration with kvceph's own code, on the controller.

    .venv/bin/python hw/h200/render.py OUT NAME [key=value ...]

Loads ``hw/h200/h200.py`` the way ``pyinfra`` does (the repository's group_data, then
``hw/h200/group_data``; ``key=value`` pairs override like ``--data``), checks the settings with
``deploys/settings/``, and writes into ``OUT/NAME/`` exactly what ``deploys/render.py`` renders
for the host: ``lmcache.yaml``, ``vllm.env`` (with its digest), ``vllm.service``, ``credentials``,
``config``, ``hosts``, the engine gate's module; plus ``runner.json``, the verifier's target and
options for ``hw/h200/prove.py``. ``H200_INVENTORY=h200pair.py`` (a file beside this one) renders
an inventory of several inference hosts: each host's files into ``OUT/NAME/<host>/`` (its
runner.json names the host: ``gpu.sh`` installs its files under a directory of its own), and
``OUT/NAME/group.json`` the cache groups ``check_inventory`` formed; an inventory with a
``router`` group (``h200router.py``) also gets ``OUT/NAME/router.json``: each route's config as
the router stage writes it (``deploys/router/routes.config``). S3 keys come from
``KVCEPH_S3_ACCESS_KEY``/``KVCEPH_S3_SECRET_KEY`` like a deploy; unset, a throwaway pair is
generated (that RGW lives and dies on an offline machine).
"""

from __future__ import annotations

import json
import os
import secrets as pysecrets
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from pyinfra.api import Config, Inventory, State  # noqa: E402
from pyinfra.context import ctx_state  # noqa: E402
from pyinfra_cli.inventory import make_inventory  # noqa: E402

from deploys import paths, preflight, render, settings  # noqa: E402
from deploys.probe.controller import probe_args, shape_of  # noqa: E402
from deploys.router import routes as routing  # noqa: E402
from deploys.settings import secrets  # noqa: E402
from deploys.settings.inventory import check_inventory  # noqa: E402
from deploys.tier import kv_sizing  # noqa: E402
from deploys.verification.controller import target_for  # noqa: E402
from deploys.verification.targets import Options  # noqa: E402

sys.path.insert(0, str(HERE))
import model  # noqa: E402

INVENTORY = HERE / os.environ.get("H200_INVENTORY", "h200.py")


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def load(overrides: dict) -> tuple[object, dict, list]:
    """The inventory, every host's checked settings and the cache groups, as preflight would
    build them."""
    # pyinfra executes inventory and group_data files inside a state context, as its CLI does.
    with ctx_state.use(State(Inventory(([], {})), Config())):
        inv = make_inventory(str(INVENTORY), override_data=overrides or None, cwd=str(REPO))
    hosts = {h.name: settings.load(h.data, h.name, list(dict.fromkeys(h.groups))) for h in inv}
    groups = check_inventory(list(hosts.values()))
    # preflight reads the model directory's config.json from the host; the GPU machine is not
    # reachable from here, so read the one hw/h200/model.py writes there
    hosts = preflight.resolve_kv_sizes(hosts, lambda _host, path: model.config_for(path))
    preflight.check_sizing(hosts, lambda _host: None)
    return inv, hosts, groups


def credentials():
    if not os.environ.get("KVCEPH_S3_ACCESS_KEY"):
        os.environ["KVCEPH_S3_ACCESS_KEY"] = "H200" + pysecrets.token_hex(8).upper()
        os.environ["KVCEPH_S3_SECRET_KEY"] = pysecrets.token_urlsafe(30)
    return secrets.load()


def _sizing(me) -> dict:
    s = kv_sizing.for_host(me)
    return {
        "kv_bytes_per_token": s.kv_bytes_per_token,
        "kv_source": me.lmcache.kv_source,
        "max_tokens": s.max_tokens,
        "request_bytes": s.request_bytes,
        "load_gb_per_s": s.load_gb_per_s,
        "load_seconds": round(s.load_seconds, 1),
        "prefill_seconds": round(s.prefill_seconds, 1),
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    overrides = {k: _value(v) for k, _, v in (a.partition("=") for a in argv[2:])}
    inv, hosts, groups = load(overrides)
    creds = credentials()
    inference = [name for name, me in hosts.items() if me.is_inference]
    if len(inference) == 1:
        write_host(
            Path(argv[0]) / argv[1],
            argv[1],
            overrides,
            inv.get_host(inference[0]),
            hosts[inference[0]],
            creds,
            None,
        )
        return 0
    out = Path(argv[0]) / argv[1]
    for name in inference:
        write_host(out / name, argv[1], overrides, inv.get_host(name), hosts[name], creds, name)
    group = {"hosts": inference, "groups": [list(g.hosts) for g in groups]}
    (out / "group.json").write_text(json.dumps(group, indent=1) + "\n")
    print(f"rendered {out}: {', '.join(inference)}; cache groups {group['groups']}")
    routers = [name for name, me in hosts.items() if me.router is not None]
    if routers:
        write_routes(out, inv, hosts, routers[0], creds)
    return 0


def write_routes(out: Path, inv, hosts: dict, router: str, creds) -> None:
    """``router.json``: the router host's routes, each its config as the router stage writes
    it (``api_key_validation_urls`` too when the engines have a key; the key itself never).

    + router: the router host's name (the first of group ``router``)
    """
    addresses = {n: str(inv.get_host(n).data.get("ssh_hostname") or n) for n in hosts}
    me = hosts[router]
    found = []
    for route in routing.routes(hosts, addresses, me.router, router):
        config = routing.config(route, me.router)
        if creds.vllm_api_key is not None:
            config["api_key_validation_urls"] = routing.api_key_validation_urls(route)
        found.append({"host": router, "model": route.model, "config": config})
    (out / "router.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"rendered {out}/router.json: {len(found)} route(s) on {router}")


def write_host(out: Path, variant: str, overrides, host, me, creds, pair_host) -> None:
    """One host's files and runner.json (``pair_host``: its name where the machine runs several
    hosts' engines, each under a directory of its own)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "lmcache.yaml": render.lmcache_yaml(me),
        "vllm.env": render.env_file(me, render.digest(me, creds)),
        "vllm.service": render.unit(me),
        "credentials": render.aws_credentials(me, creds),
        "config": render.aws_config(me),
        "hosts": "\n".join(render.hosts_lines(me)) + "\n",
        # the unit's --middleware (when the gate is on): installed at paths.GUARD_PATH
        "kvceph_engine_guard.py": render.guard_module() if me.security.guard else "",
    }
    for name, text in files.items():
        (out / name).write_text(text)
    (out / "credentials").chmod(0o600)
    target = target_for(host, me, me.verify)
    runner = {
        "variant": variant,
        "pair_host": pair_host,
        "overrides": overrides,
        "target": asdict(target),
        "options": asdict(Options.from_settings(me.verify)),
        "bucket": {
            "endpoint": me.verify.s3_endpoint or me.s3.endpoint,
            "bucket": me.s3.bucket,
            "region": me.s3.region,
            "max_objects": me.verify.max_listed_objects,
            "timeout": me.verify.s3_timeout,
        },
        "paths": {
            "lmcache": paths.LMCACHE_PATH,
            "env": paths.ENV_PATH,
            "unit": paths.UNIT_PATH,
            "aws_dir": render.aws_dir(me),
            "guard": paths.GUARD_PATH,
        },
        "lmcache": render.lmcache_config(me),
        "kv_sizing": _sizing(me),
        "engine": {
            "max_model_len": me.engine.max_model_len,
            "gpu_memory_utilization": me.engine.gpu_memory_utilization,
            "kv_dtype": me.engine.kv_dtype,
            "vllm_version": me.engine.profile.vllm_version,
            "lmcache_version": me.engine.profile.lmcache_version,
        },
    }
    (out / "runner.json").write_text(json.dumps(runner, indent=1, sort_keys=True) + "\n")
    # probe.py's remote arguments for this host (hw/h200/probe.sh runs them; NONCE replaced there)
    probe = {
        "args": probe_args(me, "NONCE"),
        "shape": asdict(shape_of(me)),
        "prefill_setting": me.lmcache.prefill_tokens_per_s,
    }
    (out / "probe.json").write_text(json.dumps(probe, indent=1) + "\n")
    print(f"rendered {out}: {', '.join(sorted(files))}, runner.json, probe.json")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
