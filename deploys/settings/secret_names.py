"""Which names hold secrets: the settings that must never be in group_data, and the
environment variable names ``kvceph_extra_env`` refuses.

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
