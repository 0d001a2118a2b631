"""Which names hold secrets: the settings that must never be in group_data, the environment
variable names ``kvceph_extra_env`` refuses, the group_data keys and the engine flags that look
like secrets.

Pure module (no pyinfra), so settings, the facts that hash secret variables and the tests
share one definition.
"""

from __future__ import annotations

# `_`-separated parts that mark a variable as secret (HF_TOKEN, AWS_SECRET_ACCESS_KEY,
# VLLM_API_KEY, DB_PASSWORD, GOOGLE_APPLICATION_CREDENTIALS, ...).
SECRET_PARTS = frozenset(
    {"KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"}
)
# Names with such a part that hold no secret.
HARMLESS = frozenset({"TOKENIZERS_PARALLELISM"})

# Settings an operator might try before finding the secrets mechanism.
GROUP_DATA_SECRETS = (
    "kvceph_s3_access_key",
    "kvceph_s3_secret_key",
    "kvceph_vllm_api_key",
    "kvceph_hf_token",
    "kvceph_models_access_key",
    "kvceph_models_secret_key",
    # the controller's variable names, written into group_data by mistake
    "KVCEPH_S3_ACCESS_KEY",
    "KVCEPH_S3_SECRET_KEY",
    "KVCEPH_VLLM_API_KEY",
    "KVCEPH_HF_TOKEN",
    "KVCEPH_MODELS_ACCESS_KEY",
    "KVCEPH_MODELS_SECRET_KEY",
)


def looks_secret(name: str) -> bool:
    """True when an environment variable name looks like it carries a secret."""
    upper = str(name).upper()
    if upper in HARMLESS:
        return False
    return any(part in SECRET_PARTS for part in upper.split("_"))


# pyinfra's own connector and authentication keys (ssh_password, ssh_key, _sudo_password,
# _su_password): pyinfra reads them, and keeps them out of its output.
PYINFRA_KEY_PREFIXES = ("ssh_", "_sudo", "_su_")


def _without_units(parts: list[str]) -> list[str]:
    """Drop the parts of a unit ("PER", "TOKEN" in BYTES_PER_TOKEN): a rate names no secret."""
    return [p for i, p in enumerate(parts) if p != "PER" and (i == 0 or parts[i - 1] != "PER")]


def looks_secret_key(key: str) -> bool:
    """True when a group_data / inventory key looks like it holds a secret (``HF_TOKEN``,
    ``my_api_key``), except pyinfra's own keys and names whose secret word is only a unit
    (``LAB_KV_BYTES_PER_TOKEN``)."""
    if str(key).startswith(PYINFRA_KEY_PREFIXES):
        return False
    kept = _without_units(str(key).upper().split("_"))
    return bool(kept) and looks_secret("_".join(kept))


# vLLM's own flags that take a secret (vllm serve --help: --api-key, --hf-token).
VLLM_SECRET_FLAGS = ("--api-key", "--hf-token")


def secret_flag(arg: str) -> str | None:
    """The flag of a command-line argument that passes a secret (``--api-key``,
    ``--hf-token=...``, any ``--...-password``), else None.

    A flag names a secret when its last word is a secret word (``--api-key``); one that only
    contains one (``--return-tokens-as-token-ids``, ``--bytes-per-token``) does not.
    """
    text = str(arg)
    if not text.startswith("--"):
        return None
    flag = text.split("=", 1)[0]
    if flag in VLLM_SECRET_FLAGS:
        return flag
    words = _without_units(flag[2:].upper().replace("-", "_").split("_"))
    return flag if words and words[-1] in SECRET_PARTS else None
