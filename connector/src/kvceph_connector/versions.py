"""Which LMCache release is installed, and the refusal of one the plugin was not built for.

Torch-free (importlib.metadata, never ``import lmcache``): the lab engine, whose venv has
LMCache without torch, runs the same check as the plugin.
"""

from __future__ import annotations

import importlib.metadata

from kvceph_connector import SUPPORTED_LMCACHE, __version__


def lmcache_version() -> str:
    """The installed LMCache release ("not installed" when there is none)."""
    try:
        return importlib.metadata.version("lmcache")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:  # a source checkout on sys.path: its _version module
        from lmcache._version import __version__ as version

        return str(version)
    except ImportError:
        return "not installed"


def check_lmcache_version(version: str | None = None) -> None:
    """Refuse an LMCache release outside SUPPORTED_LMCACHE with one ImportError line.

    + version: the release to check (default: the installed one).
    """
    version = version or lmcache_version()
    if version not in SUPPORTED_LMCACHE:
        raise ImportError(
            f"kvceph-connector {__version__} supports LMCache {', '.join(SUPPORTED_LMCACHE)}, "
            f"not the installed {version}: install a supported LMCache or use the stock "
            "connector (kvceph_lmcache_connector: lmcache)"
        )
