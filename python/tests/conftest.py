"""Fixtures of the quiver tests, which run as a 2-rank job:

    quiver run -n 2 -- python -m pytest python/tests

Both ranks run the same tests in the same order; each test opens endpoints on ports of
its own (`ports`), so a test never sees another's messages, and the ranks meet at the
end of each test (`peer`'s barrier) so that one rank's failure cannot leak into the
next test. Blocking calls are bounded (30 s) so that a failure on one rank ends in a
Timeout on the other rather than a hang.
"""

import itertools
import os

import pytest

import quiver

TIMEOUT_S = 30.0

_ports = itertools.count(10)


@pytest.fixture(scope="session")
def ctx():
    if "QUIVER_RANK" not in os.environ:
        pytest.skip("run the quiver tests as a job: quiver run -n 2 -- python -m pytest ...")
    context = quiver.Context.from_env()
    assert context.size == 2, "the quiver tests run with 2 ranks"
    return context


@pytest.fixture(scope="session")
def control(ctx):
    """Endpoint 1 of each rank, connected to the other's: the barrier's."""
    ep = ctx.endpoint(1)
    ep.timeout = TIMEOUT_S
    conn = ep.connect((1 - ctx.rank, 1))
    return ep, conn


def barrier(control):
    ep, conn = control
    ep.send(conn, b"barrier")
    data, _ = ep.recv()
    assert data == b"barrier"


class Peer:
    """One test's endpoint, connected to the same-numbered endpoint of the other rank."""

    def __init__(self, ctx, port):
        self.ctx = ctx
        self.rank = ctx.rank
        self.other = 1 - ctx.rank
        self.ep = ctx.endpoint(port)
        self.ep.timeout = TIMEOUT_S
        self.conn = self.ep.connect((self.other, port))


@pytest.fixture
def ports():
    """A fresh port number per call, the same sequence on both ranks."""
    return lambda: next(_ports)


@pytest.fixture
def peer(ctx, control, ports):
    p = Peer(ctx, ports())
    yield p
    barrier(control)
