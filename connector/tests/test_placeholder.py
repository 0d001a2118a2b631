"""The placeholder keeps the contract's names (branch connector replaces it)."""

import pytest

import kvceph_connector
from kvceph_connector.lmcache_plugin import KvcephConnectorAdapter


def test_names():
    assert kvceph_connector.SUPPORTED_LMCACHE == ("0.5.6",)
    assert kvceph_connector.__version__
    with pytest.raises(NotImplementedError):
        KvcephConnectorAdapter().create_connector(None)
