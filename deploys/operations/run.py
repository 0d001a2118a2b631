"""Operations that shape the run itself rather than a host's state."""

from pyinfra import host, inventory
from pyinfra.api import operation
from pyinfra.operations import python


@operation(is_idempotent=True)
def barrier(what: str):
    """
    A shared step every host passes: stages before it finish on all hosts first.

    + what: what is ready once every host got here

    pyinfra orders operations per host and interleaves hosts that run different stages, so an
    inference host could restart its engine before the admin host created the bucket. An
    operation called by every host from one call site is one node every host depends on.
    """
    host.noop(what)
    yield from ()


def on_the_controller(checked, name: str, function) -> None:
    """``function(checked=, inv=)`` once per run, at execution time, when every host is
    connected: the call rides on the first inference host, the work runs on the controller
    (verify.py's cycle, probe.py's probe).

    + checked: the run's Preflight
    + name: the operation's name in the plan
    + function: the controller-side work
    """
    first = next((h.host for h in checked.hosts.values() if h.is_inference), None)
    if host.name == first:
        python.call(name=name, function=function, checked=checked, inv=inventory)
