"""LMCache 0.5.6's remote storage plugins, as the lab engine emulates them (``kvceph`` only).

What LMCache does with ``remote_storage_plugins: [name]`` (storage_backend/__init__.py,
remote_backend.py, connector/__init__.py), and the lines it logs, which kvceph's readiness and
verify.py read (deploys/remote_tier.py):

1. RemoteBackend logs "Creating RemoteBackend for plugin: <name>" and builds a connector:
   the plugin launcher imports ``extra_config["remote_storage_plugin.<name>.module_path"]`` and
   takes ``.class_name`` from it; an ImportError/AttributeError is logged as "Failed to load
   remote connector <name> due to import/attribute error: ..." and no adapter exists.
2. No adapter, or the adapter's create_connector raises: "Failed to initialize/re-establish
   remote connection: ..." (no adapter: "No adapter found for URL: plugin://<name>"), the
   backend keeps no connection.
3. Success: "Connection initialized/re-established at plugin://<name>".
4. Either way "Created remote backend for plugin: <name>" follows, and vLLM serves: with no
   connection every lookup is a miss.

The lab cannot import the real plugin class (it imports LMCache's connector base and torch), so
step 1 checks what an import would find without running it: the module on sys.path and a class
of that name defined in it. Step 2 reads the ``kvceph.*`` keys as kvceph's connector does
(connector/; unknown ``kvceph.*`` keys and missing required ones fail the connector).
"""

from __future__ import annotations

import ast
import importlib.util
import logging
from dataclasses import dataclass

log = logging.getLogger("kvceph_lab_engine.lmcache")

# The keys kvceph's connector reads (the contract with deploys/render.py): name -> type.
KVCEPH_KEYS = {
    "endpoint": str,
    "region": str,
    "tls": bool,
    "connections": int,
    "timeout_s": float,
    "min_hit_tokens": int,
}
REQUIRED = ("endpoint", "region")


@dataclass(frozen=True)
class KvcephConfig:
    endpoint: str
    region: str
    tls: bool = True
    connections: int = 16
    timeout_s: float = 5.0
    min_hit_tokens: int = 0


class PluginError(RuntimeError):
    """The connector could not be created; the message is what LMCache would log after ': '."""


def _find_class(module_path: str, class_name: str) -> None:
    """ImportError / AttributeError where importing module_path and taking class_name would."""
    try:
        spec = importlib.util.find_spec(module_path)
    except (ImportError, ValueError) as exc:
        raise ImportError(str(exc)) from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ImportError(f"No module named '{module_path}'")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    if not any(isinstance(n, ast.ClassDef) and n.name == class_name for n in tree.body):
        raise AttributeError(f"module '{module_path}' has no attribute '{class_name}'")


def kvceph_config(extra: dict) -> KvcephConfig:
    """The kvceph.* keys as kvceph's connector reads them; PluginError on a bad one."""
    given = {k.removeprefix("kvceph."): v for k, v in extra.items() if k.startswith("kvceph.")}
    unknown = sorted(set(given) - set(KVCEPH_KEYS))
    if unknown:
        names = ", ".join(f"kvceph.{k}" for k in unknown)
        raise PluginError(f"kvceph connector: unknown keys {names}")
    missing = [k for k in REQUIRED if not given.get(k)]
    if missing:
        raise PluginError(f"kvceph connector: missing {', '.join('kvceph.' + k for k in missing)}")
    values = {}
    for key, value in given.items():
        kind = KVCEPH_KEYS[key]
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise PluginError(f"kvceph connector: kvceph.{key} = {value!r} is not {kind.__name__}")
        values[key] = value
    return KvcephConfig(**values)


def connect(name: str, extra: dict) -> KvcephConfig | None:
    """Steps 1-4 for one plugin: its kvceph config when it connects, None with LMCache's lines."""
    log.info("Creating RemoteBackend for plugin: %s", name)
    url = f"plugin://{name}"
    config = None
    module_path = extra.get(f"remote_storage_plugin.{name}.module_path")
    class_name = extra.get(f"remote_storage_plugin.{name}.class_name")
    adapter = False
    if not module_path or not class_name:
        log.warning("Remote connector %s missing adapter module_path or class_name", name)
    else:
        try:
            _find_class(module_path, class_name)
            adapter = True
        except (ImportError, AttributeError) as exc:
            log.error(
                "Failed to load remote connector %s due to import/attribute error: %s", name, exc
            )
    try:
        if not adapter:
            raise PluginError(f"No adapter found for URL: {url}")
        if name != "kvceph":
            raise PluginError(f"the lab engine emulates only kvceph's connector, not {name!r}")
        config = kvceph_config(extra)
        log.info("Connection initialized/re-established at %s", url)
    except PluginError as exc:
        log.warning("Failed to initialize/re-establish remote connection: %s", exc)
    log.info("Created remote backend for plugin: %s", name)
    return config
