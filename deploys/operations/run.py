"""Operations that shape the run itself rather than a host's state."""

from pyinfra import host
from pyinfra.api import operation


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
