"""deploys/facts/memo.py on a real pyinfra State: one read per run while nothing executed."""

from pyinfra.api import Config, Inventory, State
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import StateOperationHostData
from pyinfra.connectors.util import CommandOutput
from pyinfra.facts.server import Hostname, Users
from pyinfra_testing.util import FakeState, create_host

from deploys.facts import memo


def _host():
    inventory = Inventory((["h1", "h2"], {}))
    state = State(inventory, Config())
    host = inventory.get_host("h1")
    reads = []

    def get_fact(fact, **kwargs):
        reads.append((fact, kwargs))
        return {"n": len(reads), "kwargs": kwargs}

    host.get_fact = get_fact
    return state, inventory, host, reads


def _operation(state, host, op_hash, commands):
    meta = OperationMeta(op_hash, is_change=bool(commands))
    state.set_op_data_for_host(host, op_hash, StateOperationHostData(lambda: iter(()), {}, meta))
    return meta


def test_second_read_comes_from_the_first_while_nothing_ran():
    state, _, host, reads = _host()
    first = memo.read(host, Users, a=1)
    assert memo.read(host, Users, a=1) == first
    assert len(reads) == 1


def test_other_arguments_or_fact_are_another_read():
    state, _, host, reads = _host()
    memo.read(host, Users, a=1)
    memo.read(host, Users, a=2)
    memo.read(host, Hostname, a=1)
    assert len(reads) == 3


def test_an_operation_that_ran_a_command_on_any_host_makes_the_next_read_fresh():
    state, inventory, host, reads = _host()
    memo.read(host, Users)
    # An operation that ran nothing (a no-op) keeps the value.
    _operation(state, host, "noop", []).set_complete(True, [], CommandOutput([]))
    memo.read(host, Users)
    assert len(reads) == 1
    # One that is planned but not yet executed keeps it too.
    other = _operation(state, inventory.get_host("h2"), "change", ["touch /x"])
    memo.read(host, Users)
    assert len(reads) == 1
    # Executed on another host: read again (an op elsewhere can change what this host sees).
    other.set_complete(True, ["touch /x"], CommandOutput([]))
    assert memo.read(host, Users)["n"] == 2
    assert memo.read(host, Users)["n"] == 2
    assert len(reads) == 2


def test_a_failed_operation_that_ran_commands_also_counts():
    state, _, host, reads = _host()
    memo.read(host, Users)
    _operation(state, host, "failed", ["false"]).set_complete(False, ["false"], CommandOutput([]))
    memo.read(host, Users)
    assert len(reads) == 2


def test_callers_get_copies():
    state, _, host, reads = _host()
    memo.read(host, Users)["kwargs"]["mutated"] = True
    assert "mutated" not in memo.read(host, Users)["kwargs"]


def test_pyinfra_testing_fake_state_passes_through_to_the_fixture():
    host = create_host(FakeState(), facts={"server.Users": {"root": {}}})
    assert memo.read(host, Users) == {"root": {}}


def test_hosts_do_not_share_values_even_through_pyinfra_host_proxy():
    from pyinfra import host as proxy
    from pyinfra.context import ctx_host

    state, inventory, h1, reads = _host()
    h2 = inventory.get_host("h2")
    h2.get_fact = lambda fact, **kwargs: {"n": "h2"}
    with ctx_host.use(h1):
        assert memo.read(proxy, Users)["n"] == 1
    with ctx_host.use(h2):
        assert memo.read(proxy, Users) == {"n": "h2"}
    with ctx_host.use(h1):
        assert memo.read(proxy, Users)["n"] == 1
    assert len(reads) == 1
