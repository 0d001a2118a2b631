"""Every path kvceph writes or reads on the hosts, and where the controller keeps what it sends.

One home, so a path that docs/design.md ("Files on inference hosts") names is defined once and
every stage, fact and test refers to it here. Paths an operator chooses (the venv, the service
home, the model directory) are settings; their defaults are here.
"""

from __future__ import annotations

from pathlib import Path

# --- Controller: what the stages send -----------------------------------------------------------
_DEPLOYS = Path(__file__).resolve().parent
TEMPLATES = _DEPLOYS.parent / "templates"
REMOTE = _DEPLOYS / "remote"  # stdlib-only scripts copied to the hosts
CONNECTOR_SOURCE = _DEPLOYS.parent / "connector"  # built into a wheel (connector_package.py)

# --- Every host kvceph manages -------------------------------------------------------------------
CONFIG_DIR = "/etc/kvceph"
# root 0755: the run lock, the model mirror, sudo's upload directory (deploys/access/sudo.py).
STATE_DIR = "/var/lib/kvceph"
# kvceph's helper scripts (S3 admin, model mirror) and the engine gate live here.
SCRIPT_DIR = "/usr/local/lib/kvceph"
HOSTS_FILE = "/etc/hosts"

# --- Inference hosts ------------------------------------------------------------------------------
LMCACHE_PATH = f"{CONFIG_DIR}/lmcache.yaml"
ENV_PATH = f"{CONFIG_DIR}/vllm.env"  # the default engine's; render.env_path(engine) for each engine
# root:root 0600: systemd reads it before dropping privileges; no other user can.
SECRETS_PATH = f"{CONFIG_DIR}/secrets.env"
UNIT_NAME = "vllm.service"
UNIT_DIR = "/etc/systemd/system"
UNIT_PATH = f"{UNIT_DIR}/{UNIT_NAME}"
# MP mode (profile mode "mp"): LMCache's server, one per inference host, beside the engines.
MP_UNIT_NAME = "lmcache-server.service"
MP_UNIT_PATH = f"{UNIT_DIR}/{MP_UNIT_NAME}"
WHEELHOUSE = "/var/cache/kvceph/wheelhouse"
# In each venv kvceph makes (``kvceph-venv kib <size>``): only a venv holding it, or its lock
# record in ENGINE_LOCK_DIR (venvs made before the marker), is pruned
# (deploys/engine/engine_lock.py).
VENV_MARKER = ".kvceph-venv"
# The engine locks pip installs from, one per venv digest (deploys/engine/engine_lock.py).
ENGINE_LOCK_DIR = "/var/cache/kvceph/locks"
# kvceph's LMCache connector: its wheel, installed into the venv from there (--no-deps).
CONNECTOR_DIR = "/var/cache/kvceph/connector"
# kvceph's gate in front of every engine route (docs/security.md "Engine API key").
GUARD_MODULE = "kvceph_engine_guard"
GUARD_PATH = f"{SCRIPT_DIR}/{GUARD_MODULE}.py"
GUARD_SOURCE = REMOTE / "engine_guard.py"
DEFAULT_VENV = "/opt/kvceph/venv"
# Drain files (deploys/engine/drain.py): only root writes here; a tmpfs, so a reboot forgets them.
DRAIN_DIR = "/run/kvceph"
DRAIN_SOURCE = REMOTE / "engine_drain.py"
# Mirror source: the pull, and the mirror's read-only key.
MIRROR_SCRIPT = f"{SCRIPT_DIR}/model_mirror.py"
MIRROR_SOURCE = REMOTE / "model_mirror.py"
MODELS_READER_CONFIG = f"{CONFIG_DIR}/models-s3.ini"
DEFAULT_MODEL_ROOT = f"{STATE_DIR}/models"

# --- The Ceph admin host --------------------------------------------------------------------------
ADMIN_SCRIPT = f"{SCRIPT_DIR}/s3admin.py"
ADMIN_SOURCE = REMOTE / "s3admin.py"
ADMIN_DIR = f"{CONFIG_DIR}/admin"
ADMIN_CONFIG = f"{ADMIN_DIR}/s3-admin.ini"
MODELS_OWNER_CONFIG = f"{ADMIN_DIR}/models-owner.ini"
MODELS_ADMIN_READER_CONFIG = f"{ADMIN_DIR}/models-reader.ini"
# One cache group's engine keys on the admin host (its user is created and rotated from it).
GROUP_CONFIG = f"{ADMIN_DIR}/s3-group-{{group}}.ini"
# The single engine user of deploys before issue 36, while its keys are configured.
LEGACY_CONFIG = f"{ADMIN_DIR}/s3-legacy.ini"
MODELS_UPLOAD_DIR = "/var/cache/kvceph/models-upload"
# The run lock (deploys/access/lock.py).
LOCK_DIR = STATE_DIR
LOCK_FILE = f"{LOCK_DIR}/deploy.lock"
LOCK_INFO_FILE = f"{LOCK_DIR}/deploy.lock.info"

# LMCache's MP server (profile mode "mp"), one per host. Loopback only: neither the ZMQ socket
# nor the HTTP admin API (/cache/clear, /metrics) has authentication in LMCache 0.5.6. The HTTP
# port is not LMCache's default 8080 (often taken).
MP_HOST = "127.0.0.1"
MP_PORT = 5555
MP_HTTP_PORT = 8090
MP_HEALTH_URL = f"http://{MP_HOST}:{MP_HTTP_PORT}/healthcheck"
MP_METRICS_URL = f"http://{MP_HOST}:{MP_HTTP_PORT}/metrics"
