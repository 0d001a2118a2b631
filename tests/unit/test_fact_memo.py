"""deploys/facts/memo.py on a real pyinfra State: one read per run while nothing executed."""

import subprocess

from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import StateOperationHostData
from pyinfra.connectors.util import CommandOutput
from pyinfra.facts.files import Directory, File, Sha256File
from pyinfra.facts.server import Hostname, Users
from pyinfra_testing.util import FakeState, create_host

from deploys.facts import memo
from deploys.facts.engine import ServiceAccount


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


# --- prefetch: the host's facts in one command, run for real on @local ---------------------


def _local():
    from pyinfra.api.connect import connect_all

    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    connect_all(state)
    return state, inventory.get_host("@local")


class _MissingClient(FactBase):
    requires_command = "kvceph-no-such-client"
    command = "kvceph-no-such-client --version"

    def process(self, output):
        return output


def test_prefetch_keeps_what_each_fact_read_alone_gives(tmp_path):
    state, host = _local()
    (tmp_path / "a b.txt").write_text("content\n")
    (tmp_path / "no-newline").write_text("x")
    path = str(tmp_path / "a b.txt")
    reads = [
        (File, {"path": path}),
        (Sha256File, {"path": path}),
        (Directory, {"path": str(tmp_path)}),
        (File, {"path": str(tmp_path)}),  # a directory: False
        (File, {"path": str(tmp_path / "missing")}),  # None
        (Sha256File, {"path": str(tmp_path / "no-newline")}),
        (ServiceAccount, {"user": "root"}),
    ]
    assert memo.prefetch(host, reads) == len(reads)
    alone = [host.get_fact(cls, **kwargs) for cls, kwargs in reads]

    def no_read(fact, **kwargs):
        raise AssertionError(f"{fact.__name__} went to the host after the prefetch")

    host.get_fact = no_read
    assert [memo.read(host, cls, **kwargs) for cls, kwargs in reads] == alone
    assert alone[3] is False and alone[4] is None
    assert alone[6]["user"]["home"] == "/root"


def test_prefetch_leaves_a_fact_without_its_client_to_the_operation():
    state, host = _local()
    assert memo.prefetch(host, [(_MissingClient, {}), (Hostname, {})]) == 1


def test_prefetched_values_are_read_again_once_an_operation_ran(tmp_path):
    state, host = _local()
    memo.prefetch(host, [(File, {"path": str(tmp_path)})])
    _operation(state, host, "change", ["mkdir /x"]).set_complete(True, ["x"], CommandOutput([]))
    reads = []
    host.get_fact = lambda fact, **kwargs: reads.append(fact) or "fresh"
    assert memo.read(host, File, path=str(tmp_path)) == "fresh"
    assert reads == [File]


def test_batch_round_trip_through_sh():
    commands = [
        "echo one",
        "printf 'two\\nlines'",  # no final newline
        "exit 3",
        "true",  # no output
        "cat <<EOF\nheredoc\nEOF",
        "echo '@m 0 0'; echo '{ ( looks like a part'",  # text that looks like framing
        "echo err >&2; echo out",
    ]
    command = memo.batch_command(commands, "@m-1")
    assert memo.batch_parts(command) == ("@m-1", commands)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert memo.split_batch(out.stdout.splitlines(), "@m-1", len(commands)) == [
        (0, ["one"]),
        (0, ["two", "lines"]),
        (3, []),
        (0, []),
        (0, ["heredoc"]),
        (0, ["@m 0 0", "{ ( looks like a part"]),
        (0, ["out"]),
    ]


def test_split_batch_drops_a_part_whose_marker_is_torn():
    lines = ["@m 0 0", "a", "@m 1 ", "half", "@m 2 1", "b"]
    assert memo.split_batch(lines, "@m", 4) == [(0, ["a"]), None, (1, ["b"]), None]
    assert memo.batch_parts("echo not a batch") is None


def test_a_lane_runs_its_commands_one_after_another(tmp_path):
    flag = tmp_path / "first-done"
    commands = [f"sleep 0.2; touch {flag}", "echo beside", f"test -e {flag} && echo after"]
    lanes = ["orchestrator", None, "orchestrator"]
    command = memo.batch_command(commands, "@m", lanes)
    assert memo.batch_parts(command) == ("@m", commands)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert memo.split_batch(out.stdout.splitlines(), "@m", 3) == [
        (0, []),
        (0, ["beside"]),
        (0, ["after"]),
    ]
