"""The ansible-core peer's variables: every file's content from kvceph's own renderer.

Both tools then write byte-identical files, so the benchmark compares how they place them,
not what they write. The file holds the S3 keys (the AWS credentials file's text): it is
written 0600 into the lab's state directory, never into the repository.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from deploys import paths, render, settings
from deploys.operations import tls
from deploys.settings import group_data, secrets

REPO = Path(__file__).resolve().parent.parent


def lab_host_settings(host: str = "gpu1", environ: dict | None = None) -> settings.HostSettings:
    """The settings kvceph loads for a lab gpu host: group_data all -> gpu -> lab.

    group_data reads the environment (KVCEPH_LAB_HOSTS: a benchmark lab keeps the hub model
    source); it is read here under ``environ``, the environment kvceph's own run gets.
    """
    data = group_data.read(("all", "gpu", "lab"), environ)
    return settings.load(data, host, ("gpu", "lab"))


def variables(me: settings.HostSettings, credentials) -> dict:
    """Everything site.yml reads, for one (identical) lab gpu host."""
    e = me.engine
    pins = list(e.profile.packages)
    return {
        "service_user": e.service_user,
        "service_home": e.service_home,
        "venv": e.venv,
        "port": e.port,
        "model": e.model,
        "health_timeout": e.health_timeout,
        "wheelhouse_dest": paths.WHEELHOUSE,
        "wheels": sorted(str(p) for p in Path(e.wheelhouse).glob("*.whl")),
        # kvceph installs LMCache with --no-deps beside an emulating engine
        "engine_packages": [p for p in pins if not p.startswith("lmcache==")],
        "nodeps_packages": [p for p in pins if p.startswith("lmcache==")],
        "lmcache_yaml": render.lmcache_yaml(me),
        "aws_credentials": render.aws_credentials(me, credentials),
        "aws_config": render.aws_config(me),
        # The benchmark lab's bucket name has one address: lineinfile writes one line.
        "hosts_line": next(iter(render.hosts_lines(me)), None),
        "env_file": render.env_file(me, render.digest(me, credentials)),
        "secrets_path": paths.SECRETS_PATH,
        "secrets_env": render.secrets_env_file(credentials).reveal(),
        "api_key": credentials.vllm_api_key.reveal() if credentials.vllm_api_key else "",
        "guard": me.security.guard,
        "guard_dir": paths.SCRIPT_DIR,
        "guard_path": paths.GUARD_PATH,
        "guard_module": render.guard_module(),
        # Debian's trust store, as deploys/operations/tls.ca_trusted places it
        "ca_anchor": f"/usr/local/share/ca-certificates/{tls.ANCHOR_NAME}",
        "ca_pem": me.security.s3_ca_pem or "",
        "unit_file": render.unit(me),
    }


def write(path: Path, environ: dict) -> Path:
    """Write the vars file (JSON is YAML) with mode 0600; keys found through ``environ``."""
    me = lab_host_settings(environ=environ)
    text = json.dumps(variables(me, secrets.load(environ)), indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
