"""quiver for Python: messages between the processes of a job.

    import quiver
    ctx = quiver.Context.from_env()          # under `quiver run -n 2 -- python prog.py`
    ep = ctx.endpoint(0)                     # this rank's endpoint (rank, 0)
    conn = ep.connect((1 - ctx.rank, 0))     # a connection to the peer's endpoint
    ep.send(conn, b"hello")                  # any buffer: bytes, bytearray, numpy...
    data, src = ep.recv()                    # bytes and the sender's (rank, port)
    ep.send_tagged(conn, 42, b"work")        # a 64-bit tag
    data, src, tag = ep.recv_matching(42)    # by tag (mask=, source= narrow or widen it)
    ep.register_handler(1, lambda m: m.reply(m.payload))  # active messages: run in
    ep.send_am(conn, 1, b"header", b"payload")            # progress() and receives
    req = ep.post_recv_into(array)           # posted on your buffer (held until it ends)
    n, src, tag = req.wait()                 # or req.test(), req.cancel()

Blocking calls release the GIL. Each thread drives its own endpoints (one Context per
process, shared). `await ep.recv_async()` receives in asyncio through the endpoint's
descriptor. Errors are exceptions under QuiverError, one class per kind.
"""

import asyncio

from . import _quiver
from ._quiver import (
    ActiveMessage,
    BufferTooSmall,
    ConfigError,
    Connection,
    Corrupt,
    EndpointBusy,
    InHandler,
    InvalidArgument,
    IoError,
    MessageTooLarge,
    OutOfSharedMemory,
    PeerClosed,
    PeerDead,
    PeerStopped,
    PermissionDenied,
    QuiverError,
    Refused,
    Request,
    RmaError,
    SendDeadlock,
    Timeout,
    TransportUnavailable,
    UnknownHandler,
    Unreachable,
    VersionMismatch,
    WouldBlock,
    WrongKey,
)

__version__ = _quiver.__version__

__all__ = [
    "Context",
    "Endpoint",
    "Connection",
    "ActiveMessage",
    "Request",
    "QuiverError",
    "WouldBlock",
    "BufferTooSmall",
    "PeerDead",
    "PeerStopped",
    "SendDeadlock",
    "PeerClosed",
    "Corrupt",
    "MessageTooLarge",
    "Unreachable",
    "Refused",
    "WrongKey",
    "VersionMismatch",
    "PermissionDenied",
    "TransportUnavailable",
    "OutOfSharedMemory",
    "Timeout",
    "RmaError",
    "InvalidArgument",
    "ConfigError",
    "IoError",
    "EndpointBusy",
    "UnknownHandler",
    "InHandler",
]


class Endpoint(_quiver.Endpoint):
    """An endpoint (rank, port) of this process; open it with Context.endpoint(port).

    Driven by one thread at a time: give each thread its own. Adds asyncio receives to the
    methods of quiver._quiver.Endpoint (send, recv, recv_into, send_tagged,
    recv_matching, recv_into_matching, probe, post_send, post_recv_into,
    register_handler, send_am, try_*, connect, reply, close, arm, arm_matching, fileno,
    progress, timeout, am_stats).
    """

    async def recv_async(self):
        """Receives the next message in asyncio: (bytes, (rank, port) of the sender).

        Waits on the endpoint's descriptor (loop.add_reader), so the event loop runs
        other tasks meanwhile and no thread is spent.
        """
        return await self._wait_for(self.try_recv, self.arm)

    async def recv_into_async(self, buf):
        """Receives the next message into buf in asyncio: (length, sender)."""
        return await self._wait_for(lambda: self.try_recv_into(buf), self.arm)

    async def recv_matching_async(self, tag=None, *, mask=None, source=None):
        """recv_matching in asyncio: (bytes, sender, tag) of the earliest match.

        Sleeps on the descriptor also while messages that do not match wait in the
        endpoint (armed with arm_matching): no polling.
        """
        return await self._wait_for(
            lambda: self.try_recv_matching(tag, mask=mask, source=source),
            lambda: self.arm_matching(tag, mask=mask, source=source),
        )

    async def recv_into_matching_async(self, buf, tag=None, *, mask=None, source=None):
        """recv_into_matching in asyncio: (length, sender, tag) of the earliest match."""
        return await self._wait_for(
            lambda: self.try_recv_into_matching(buf, tag, mask=mask, source=source),
            lambda: self.arm_matching(tag, mask=mask, source=source),
        )

    async def _wait_for(self, attempt, arm):
        """Tries `attempt` until it stops raising WouldBlock, sleeping on the endpoint's
        descriptor (loop.add_reader) in between, armed by `arm` (arm, or arm_matching
        for a matching receive, which sleeps past messages it does not match)."""
        loop = asyncio.get_running_loop()
        fd = self.fileno()
        while True:
            try:
                return attempt()
            except WouldBlock:
                pass
            if not arm():
                # Something this receive can take arrived between the attempt and the
                # arming: the next attempt takes it (after letting the loop run other
                # tasks once).
                await asyncio.sleep(0)
                continue
            ready = loop.create_future()

            def wake():
                if not ready.done():
                    ready.set_result(None)

            loop.add_reader(fd, wake)
            try:
                await ready
            finally:
                loop.remove_reader(fd)


class Context:
    """One process's membership of a job: create it once per process with from_env().

    Shared by every thread of the process; each thread opens its own endpoints.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner):
        self._inner = inner

    @classmethod
    def from_env(cls):
        """The context of whatever launched this process (quiver run, mpirun, srun).

        Raises ConfigError when the environment describes no job.
        """
        return cls(_quiver.Context.from_env())

    @property
    def rank(self):
        """This process's rank."""
        return self._inner.rank

    @property
    def size(self):
        """The number of ranks in the job."""
        return self._inner.size

    @property
    def job_id(self):
        """The job's identifier."""
        return self._inner.job_id

    def endpoint(self, port=0):
        """Opens endpoint `port` of this rank (peers reach it at (rank, port))."""
        return Endpoint(self._inner, port)

    def stats(self):
        """The listener's counters, as a dict."""
        return self._inner.stats()

    def __repr__(self):
        return repr(self._inner)
