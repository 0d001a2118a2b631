"""deploys/engine/engine_address.py: where kvceph's checks reach an engine, for every bind it
takes."""

from __future__ import annotations

import pytest

from deploys.engine import engine_address as a

CASES = [
    # bind, reached on its host at, the gate's extra network, the controller's address
    ("0.0.0.0", "http://127.0.0.1:8000", None, None),
    ("::", "http://[::1]:8000", None, None),
    ("127.0.0.1", "http://127.0.0.1:8000", None, None),
    ("::1", "http://[::1]:8000", None, None),
    ("10.67.0.21", "http://10.67.0.21:8000", "10.67.0.21/32", "10.67.0.21"),
    ("fd00:0:0::21", "http://[fd00::21]:8000", "fd00::21/128", "fd00::21"),
]


@pytest.mark.parametrize(("bind", "url", "own", "remote"), CASES)
def test_every_bind(bind, url, own, remote):
    assert a.local_url(bind, 8000) == url
    assert a.own_network(bind) == own
    assert a.remote(bind) == remote
