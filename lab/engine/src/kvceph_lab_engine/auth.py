"""API-key check shaped like vLLM's AuthenticationMiddleware.

vLLM (vllm/entrypoints/serve/utils/server_utils.py) takes the keys from ``--api-key`` or
``VLLM_API_KEY`` and checks only paths that start with a guarded prefix; everything else
(/health, /metrics, /tokenize, /detokenize, /invocations, /version, /ping) answers without a
key. OPTIONS is never checked. A request is accepted when ``Authorization`` is
``<scheme> <token>`` with scheme ``bearer`` (any case) and sha256(token) equals a key's sha256
(constant-time). A refusal is ``401 {"error": "Unauthorized"}`` and nothing else: no
WWW-Authenticate header, no detail.
"""

from __future__ import annotations

import hashlib
import secrets

# The prefixes vLLM guards; later releases add "/cohere", which the lab serves nothing under.
GUARDED_PREFIX = ("/v1", "/v2", "/inference")
UNAUTHORIZED = {"error": "Unauthorized"}


class ApiKeys:
    """The accepted keys, kept only as sha256 digests (like vLLM)."""

    def __init__(self, tokens: list[str]):
        self._digests = [hashlib.sha256(t.encode()).digest() for t in tokens if t]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def allows(self, method: str, path: str, authorization: str | None) -> bool:
        if not self.enabled or method == "OPTIONS" or not path.startswith(GUARDED_PREFIX):
            return True
        if not authorization:
            return False
        scheme, _, param = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode()).digest()
        match = False
        for known in self._digests:
            match |= secrets.compare_digest(digest, known)
        return match
