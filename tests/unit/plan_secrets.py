"""Secrets for the unit tests that plan stages: the admin key and every cache group's keys
under the names the tests' hosts get (kvceph_cache_group's default, the lab's names)."""

from deploys.settings.secrets import Secret, Secrets

GROUPS = ("qwen3-32b-tp1", "qwen3-32b-tp2", "qwen3-32b-tp4", "qwen3-32b-tp8", "gpu", "gaudi")


def plan_secrets(access: str = "AKIAPLAN", secret: str = "plan-secret-value", **optional):
    """Secrets whose group keys are ``access``/``secret`` for every group (as the tests expect
    one key pair on every inference host), the admin's their ``ADMIN`` variants."""
    return Secrets(
        None,
        None,
        "test",
        admin_access_key=Secret("ADMIN" + access),
        admin_secret_key=Secret("admin-" + secret),
        group_keys=tuple((g, Secret(access), Secret(secret)) for g in GROUPS),
        **optional,
    )
