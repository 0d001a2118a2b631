"""S3 credentials: from the environment or a git-ignored secrets file, never from group_data.

The values are wrapped so that an accidental ``print``, ``repr`` or f-string shows ``***``.
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
DEFAULT_FILE = "secrets.env"


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
class S3Credentials:
    access_key: Secret
    secret_key: Secret
    source: str


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


def load(environ: dict[str, str] | None = None, cwd: str | None = None) -> S3Credentials:
    """Credentials from env vars, else from the secrets file (``$KVCEPH_SECRETS_FILE``)."""
    env = os.environ if environ is None else environ
    source = "environment"
    access, secret = env.get(ACCESS_ENV), env.get(SECRET_ENV)
    if not (access and secret):
        path = Path(env.get(FILE_ENV) or Path(cwd or os.getcwd()) / DEFAULT_FILE)
        if not path.is_file():
            raise SecretsError(
                f"controller: S3 credentials missing: neither {ACCESS_ENV}/{SECRET_ENV} are set "
                f"nor {path} exists; fix: export them or write {path} (KEY=VALUE, mode 0600)"
            )
        if path.stat().st_mode & 0o077:
            raise SecretsError(
                f"controller: {path} is readable by group/others; fix: chmod 600 {path}"
            )
        values = _read_env_file(path)
        access, secret, source = values.get(ACCESS_ENV), values.get(SECRET_ENV), str(path)
        if not (access and secret):
            raise SecretsError(
                f"controller: {path} lacks {ACCESS_ENV} or {SECRET_ENV}; fix: add both lines"
            )
    for name, value in ((ACCESS_ENV, access), (SECRET_ENV, secret)):
        if value != value.strip() or any(c.isspace() for c in value):
            # The seed's "401 from stray whitespace" failure mode, caught before any host.
            raise SecretsError(f"controller: {name} contains whitespace; fix: remove it")
    return S3Credentials(Secret(access), Secret(secret), source)
