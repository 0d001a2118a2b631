"""PURE: the cache-aware router's routes, configuration and unit (docs/router.md)."""
