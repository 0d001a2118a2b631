"""Secrets: from the environment or a git-ignored 0600 file, never from group_data.

One mechanism for every secret kvceph handles:

  KVCEPH_S3_ADMIN_ACCESS_KEY / _SECRET_KEY     the bucket owner's keys (admin host, controller)
  KVCEPH_S3_ACCESS_KEY_<GROUP> / ..._SECRET_KEY_<GROUP>
                                               one cache group's engine user (its hosts only);
                                               <GROUP> is kvceph_cache_group, upper, - -> _
  KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY   the single engine user of deploys before
                                               issue 36 (kept working until its engines roll)
  KVCEPH_PYTHON_HASH_SEED                      the fleet's PYTHONHASHSEED (optional; else the
                                               public group_data default, with a warning)
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
import re
from dataclasses import dataclass, replace
from pathlib import Path

ACCESS_ENV, SECRET_ENV, FILE_ENV = (
    "KVCEPH_S3_ACCESS_KEY",
    "KVCEPH_S3_SECRET_KEY",
    "KVCEPH_SECRETS_FILE",
)
API_KEY_ENV, HF_TOKEN_ENV = "KVCEPH_VLLM_API_KEY", "KVCEPH_HF_TOKEN"
MODELS_ACCESS_ENV, MODELS_SECRET_ENV = "KVCEPH_MODELS_ACCESS_KEY", "KVCEPH_MODELS_SECRET_KEY"
ADMIN_ACCESS_ENV, ADMIN_SECRET_ENV = "KVCEPH_S3_ADMIN_ACCESS_KEY", "KVCEPH_S3_ADMIN_SECRET_KEY"
HASH_SEED_ENV = "KVCEPH_PYTHON_HASH_SEED"
OPTIONAL = (
    API_KEY_ENV,
    HF_TOKEN_ENV,
    MODELS_ACCESS_ENV,
    MODELS_SECRET_ENV,
    ADMIN_ACCESS_ENV,
    ADMIN_SECRET_ENV,
    HASH_SEED_ENV,
)
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

    access_key: Secret | None  # the legacy single engine user (engine(): a group's)
    secret_key: Secret | None
    source: str
    vllm_api_key: Secret | None = None
    hf_token: Secret | None = None
    models_access_key: Secret | None = None  # the model mirror's read-only key
    models_secret_key: Secret | None = None
    admin_access_key: Secret | None = None  # the bucket owner (never on an inference host)
    admin_secret_key: Secret | None = None
    # (kvceph_cache_group, access key, secret key) of every group key pair found
    group_keys: tuple[tuple[str, Secret, Secret], ...] = ()
    hash_seed: Secret | None = None  # KVCEPH_PYTHON_HASH_SEED

    def group(self, name: str) -> tuple[Secret, Secret] | None:
        """One cache group's key pair, or None when it is not configured."""
        return next(((a, s) for g, a, s in self.group_keys if g == name), None)

    def engine(self, group: str) -> Secrets:
        """These secrets as one cache group's hosts get them: ``access_key``/``secret_key`` are
        the group user's (preflight refused a group without keys), no admin key."""
        pair = self.group(group)
        if pair is None:
            raise SecretsError(
                f"controller: {group_access_env(group)} / {group_secret_env(group)} missing; "
                f"fix: {MECHANISM}"
            )
        return replace(
            self, access_key=pair[0], secret_key=pair[1], admin_access_key=None,
            admin_secret_key=None, group_keys=(),
        )  # fmt: skip

    def admin(self) -> Secrets:
        """These secrets with ``access_key``/``secret_key`` the bucket owner's (admin host,
        controller: verify.py's and the probe's deletes, the S3 tier's bucket operations)."""
        if not (self.admin_access_key and self.admin_secret_key):
            raise SecretsError(
                f"controller: {ADMIN_ACCESS_ENV} / {ADMIN_SECRET_ENV} missing; fix: {MECHANISM}"
            )
        return replace(self, access_key=self.admin_access_key, secret_key=self.admin_secret_key)

    @property
    def legacy(self) -> bool:
        """The single engine user's keys of a deploy before issue 36 are still configured."""
        return bool(self.access_key and self.secret_key)


def group_suffix(group: str) -> str:
    """``gpu-a`` -> ``GPU_A``: the variable-name part of a cache group's name."""
    return group.upper().replace("-", "_")


def group_access_env(group: str) -> str:
    return f"{ACCESS_ENV}_{group_suffix(group)}"


def group_secret_env(group: str) -> str:
    return f"{SECRET_ENV}_{group_suffix(group)}"


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
    source = "environment" if from_file is None else str(path)
    merged = {**(from_file or {}), **{k: v for k, v in env.items() if k.startswith("KVCEPH_")}}
    access, secret = env.get(ACCESS_ENV), env.get(SECRET_ENV)
    if not (access and secret) and from_file is not None:
        access, secret = from_file.get(ACCESS_ENV), from_file.get(SECRET_ENV)
    if bool(access) != bool(secret):
        raise SecretsError(
            f"controller: {ACCESS_ENV} or {SECRET_ENV} is set without the other; fix: set both "
            "or neither"
        )
    groups = _group_keys(merged)
    if not (access or merged.get(ADMIN_ACCESS_ENV)):
        raise SecretsError(
            f"controller: S3 credentials missing: neither {ADMIN_ACCESS_ENV} and "
            f"{ACCESS_ENV}_<GROUP> are set nor {path} holds them; fix: export them or write "
            f"{path} (KEY=VALUE, mode 0600; docs/security.md)"
        )
    optional = {name: env.get(name) or (from_file or {}).get(name) or None for name in OPTIONAL}
    seed = optional[HASH_SEED_ENV]
    if seed is not None and not (seed.isdigit() and int(seed) <= 4294967295):
        raise SecretsError(
            f"controller: {HASH_SEED_ENV} = '***': must be an integer 0..4294967295; fix: set "
            "it to the fleet's seed, digits only (or unset it: kvceph_python_hash_seed)"
        )
    named = [(ACCESS_ENV, access), (SECRET_ENV, secret), *optional.items()]
    named += [(group_access_env(g), a) for g, a, _ in groups]
    named += [(group_secret_env(g), s) for g, _, s in groups]
    for name, value in named:
        if value is not None and (value != value.strip() or any(c.isspace() for c in value)):
            # The seed's "401 from stray whitespace" failure mode, caught before any host.
            raise SecretsError(f"controller: {name} contains whitespace; fix: remove it")
    return Secrets(
        _opt(access),
        _opt(secret),
        source,
        vllm_api_key=Secret(optional[API_KEY_ENV]) if optional[API_KEY_ENV] else None,
        hf_token=Secret(optional[HF_TOKEN_ENV]) if optional[HF_TOKEN_ENV] else None,
        models_access_key=_opt(optional[MODELS_ACCESS_ENV]),
        models_secret_key=_opt(optional[MODELS_SECRET_ENV]),
        admin_access_key=_opt(optional[ADMIN_ACCESS_ENV]),
        admin_secret_key=_opt(optional[ADMIN_SECRET_ENV]),
        group_keys=tuple((g, Secret(a), Secret(s)) for g, a, s in groups),
        hash_seed=_opt(seed),
    )


_GROUP_ACCESS = re.compile(re.escape(ACCESS_ENV) + r"_([A-Z0-9_]+)")


def _group_keys(merged: dict[str, str]) -> list[tuple[str, str, str]]:
    """(group, access, secret) of every ``KVCEPH_S3_ACCESS_KEY_<GROUP>`` with its secret."""
    out = []
    for name in sorted(merged):
        m = _GROUP_ACCESS.fullmatch(name)
        if not m or not merged[name]:
            continue
        group = m.group(1).lower().replace("_", "-")
        secret = merged.get(group_secret_env(group))
        if not secret:
            raise SecretsError(
                f"controller: {name} is set without {group_secret_env(group)}; fix: add it"
            )
        out.append((group, merged[name], secret))
    return out


def _opt(value: str | None) -> Secret | None:
    return Secret(value) if value else None
