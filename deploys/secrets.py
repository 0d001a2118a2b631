"""Secrets: from the environment or a git-ignored 0600 file, never from group_data.

One mechanism for every secret kvceph handles:

  KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY   the RGW user's keys (required)
  KVCEPH_VLLM_API_KEY                          the engines' API key (optional)
  KVCEPH_HF_TOKEN                              a Hugging Face token for gated models (optional)
  KVCEPH_MODELS_ACCESS_KEY / _SECRET_KEY       the model mirror's read-only key (mirror source)

Each is looked up in the environment first, then in the secrets file (``$KVCEPH_SECRETS_FILE``,
default ``./secrets.env``, KEY=VALUE lines, mode 0600). The values are wrapped so that an
accidental ``print``, ``repr`` or f-string shows ``***``. docs/security.md says where each one
ends up on the hosts and how to rotate it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ACCESS_ENV, SECRET_ENV, FILE_ENV = (
    "KVCEPH_S3_ACCESS_KEY",
    "KVCEPH_S3_SECRET_KEY",
    "KVCEPH_SECRETS_FILE",
)
API_KEY_ENV, HF_TOKEN_ENV = "KVCEPH_VLLM_API_KEY", "KVCEPH_HF_TOKEN"
MODELS_ACCESS_ENV, MODELS_SECRET_ENV = "KVCEPH_MODELS_ACCESS_KEY", "KVCEPH_MODELS_SECRET_KEY"
OPTIONAL = (API_KEY_ENV, HF_TOKEN_ENV, MODELS_ACCESS_ENV, MODELS_SECRET_ENV)
DEFAULT_FILE = "secrets.env"
# Where docs and one-line errors send an operator who put a secret somewhere else.
MECHANISM = (
    f"export {API_KEY_ENV} / {HF_TOKEN_ENV} / {ACCESS_ENV} / {SECRET_ENV} or put them in "
    "secrets.env (0600; docs/security.md)"
)


class SecretsError(ValueError):
    """No usable credentials; the message says where they were looked for."""


class Secret(str):
    """A str whose repr/str in logs is masked; use ``.reveal()`` where the value is needed."""

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def reveal(self) -> str:
        return str.__str__(self)


@dataclass(frozen=True)
class Secrets:
    """Every secret of one run. ``vllm_api_key`` and ``hf_token`` are None when not set."""

    access_key: Secret
    secret_key: Secret
    source: str
    vllm_api_key: Secret | None = None
    hf_token: Secret | None = None
    models_access_key: Secret | None = None  # the model mirror's read-only key
    models_secret_key: Secret | None = None


# The S3 keys were the first secrets; code that only needs them still says so.
S3Credentials = Secrets


def _read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise SecretsError(f"{path}:{lineno}: expected KEY=VALUE; fix the line")
        key, value = line.split("=", 1)
        values[key.strip()] = value.strip().strip("'\"")
    return values


def _private_file(path: Path) -> dict[str, str]:
    if path.stat().st_mode & 0o077:
        raise SecretsError(f"controller: {path} is readable by group/others; fix: chmod 600 {path}")
    return _read_env_file(path)


def load(environ: dict[str, str] | None = None, cwd: str | None = None) -> Secrets:
    """Every secret: each from its env var, else from the secrets file ($KVCEPH_SECRETS_FILE)."""
    env = os.environ if environ is None else environ
    path = Path(env.get(FILE_ENV) or Path(cwd or os.getcwd()) / DEFAULT_FILE)
    from_file: dict[str, str] | None = _private_file(path) if path.is_file() else None
    source = "environment"
    access, secret = env.get(ACCESS_ENV), env.get(SECRET_ENV)
    if not (access and secret):
        if from_file is None:
            raise SecretsError(
                f"controller: S3 credentials missing: neither {ACCESS_ENV}/{SECRET_ENV} are set "
                f"nor {path} exists; fix: export them or write {path} (KEY=VALUE, mode 0600)"
            )
        access, secret, source = from_file.get(ACCESS_ENV), from_file.get(SECRET_ENV), str(path)
        if not (access and secret):
            raise SecretsError(
                f"controller: {path} lacks {ACCESS_ENV} or {SECRET_ENV}; fix: add both lines"
            )
    optional = {name: env.get(name) or (from_file or {}).get(name) or None for name in OPTIONAL}
    for name, value in ((ACCESS_ENV, access), (SECRET_ENV, secret), *optional.items()):
        if value is not None and (value != value.strip() or any(c.isspace() for c in value)):
            # The seed's "401 from stray whitespace" failure mode, caught before any host.
            raise SecretsError(f"controller: {name} contains whitespace; fix: remove it")
    return Secrets(
        Secret(access),
        Secret(secret),
        source,
        vllm_api_key=Secret(optional[API_KEY_ENV]) if optional[API_KEY_ENV] else None,
        hf_token=Secret(optional[HF_TOKEN_ENV]) if optional[HF_TOKEN_ENV] else None,
        models_access_key=_opt(optional[MODELS_ACCESS_ENV]),
        models_secret_key=_opt(optional[MODELS_SECRET_ENV]),
    )


def _opt(value: str | None) -> Secret | None:
    return Secret(value) if value else None
