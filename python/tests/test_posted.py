"""Sends and receives posted on the caller's buffers (numpy arrays, bytearrays,
memoryviews), byte-verified; the buffer held by its request (a bytearray cannot be resized
while posted); test, wait past the timeout, cancel; and the asyncio matching receive that
sleeps on the descriptor while a message of another tag waits."""

import asyncio
import time

import numpy as np
import pytest

import quiver


def values(rank, n):
    return (np.arange(n, dtype=np.uint64) * 2654435761 ^ (rank + 1) * 0x9E3779B9).astype(
        np.uint32
    )


# (offset in the sender's array, offset in the receiver's, length) in uint32 values.
PARTS = [(3, 7, 10), (1000, 100, 20_000), (50_000, 60_000, 300_001)]


def test_posted_on_parts_of_arrays(peer):
    """Receives posted into parts of one numpy array (a view, a memoryview of it and a
    numpy slice), sends posted from slices of another, tagged; the receives waited for in
    reverse order: each holds the message of its place in the posting order, every value
    checked, nothing outside the parts written."""
    ep, conn = peer.ep, peer.conn
    mine = values(peer.rank, 400_000)
    theirs = values(peer.other, 400_000)
    landing = np.zeros(400_000, dtype=np.uint32)
    targets = [
        landing[7:17],
        memoryview(landing)[100:20_100],
        landing[60_000:360_001],
    ]
    recvs = [ep.post_recv_into(t) for t in targets]
    sends = [ep.post_send(conn, mine[a : a + n], tag=7 + i) for i, (a, _, n) in enumerate(PARTS)]
    for s in sends:
        assert s.wait() is None
        assert s.done
    for i in reversed(range(len(PARTS))):
        a, b, n = PARTS[i]
        got = recvs[i].wait()
        assert got == (4 * n, (peer.other, conn.peer[1]), 7 + i), i
        assert np.array_equal(landing[b : b + n], theirs[a : a + n]), f"part {i} differs"
        landing[b : b + n] = 0
        # Its outcome again, at once.
        assert recvs[i].wait() == got
    assert not landing.any(), "written outside the parts"


def test_posted_bytearray_and_floats(peer):
    """A bytearray, a float64 array and a matching receive by tag; a posted send from a
    bytearray."""
    ep, conn = peer.ep, peer.conn
    field = np.linspace(0.0, 1.0, 5000) + peer.rank
    text = bytearray(b"posted from a bytearray")
    halo = np.zeros(6000)
    into = bytearray(64)
    got_text = ep.post_recv_into(into, 3)  # tag 3 exactly
    got_field = ep.post_recv_into(halo[10:], 4)
    s1 = ep.post_send(conn, field[1000:3000], tag=4)
    s2 = ep.post_send(conn, text, tag=3)
    s1.wait()
    s2.wait()
    assert got_field.wait() == (2000 * 8, (peer.other, conn.peer[1]), 4)
    assert got_text.wait() == (len(text), (peer.other, conn.peer[1]), 3)
    other = np.linspace(0.0, 1.0, 5000) + peer.other
    assert np.array_equal(halo[10:2010], other[1000:3000])
    assert not halo[:10].any() and not halo[2010:].any()
    assert into[: len(text)] == text and not any(into[len(text) :])


def test_a_posted_bytearray_cannot_be_resized(peer, control):
    """The request holds the bytearray's buffer export: resizing it raises BufferError
    (nothing moves under quiver), until the request ends."""
    ep, conn = peer.ep, peer.conn
    cep, cconn = control
    if peer.rank == 1:
        assert cep.recv()[0] == b"send"
        ep.send(conn, b"hello")
        return
    buf = bytearray(16)
    req = ep.post_recv_into(buf)
    with pytest.raises(BufferError):
        buf.extend(b"more")
    with pytest.raises(BufferError):
        del buf[0]
    assert len(buf) == 16
    sent_from = bytearray(b"kept")
    send = ep.post_send(conn, sent_from)
    with pytest.raises(BufferError):
        sent_from.clear()
    cep.send(cconn, b"send")
    assert req.wait() == (5, (1, conn.peer[1]), 0)
    assert buf[:5] == b"hello" and not any(buf[5:])
    send.wait()
    # Ended: the exports are released.
    buf.extend(b"more")
    sent_from.clear()
    assert len(buf) == 20


def test_test_timeout_and_cancel(peer, control):
    """test() before and after the message; wait() past the timeout raises Timeout and
    keeps the request; cancel() before the message withdraws it (the buffer untouched,
    the message goes to a later receive), after it completes it."""
    ep, conn = peer.ep, peer.conn
    cep, cconn = control
    if peer.rank == 1:
        for what in [b"late", b"after the cancel", b"arrived"]:
            assert cep.recv()[0] == b"send"
            ep.send(conn, what)
        assert cep.recv()[0] == b"done"
        return

    def ask():
        cep.send(cconn, b"send")

    buf = bytearray(32)
    req = ep.post_recv_into(buf)
    assert not req.test() and not req.done
    ep.timeout = 0.05
    with pytest.raises(quiver.Timeout):
        req.wait()
    ep.timeout = 30.0
    assert not req.done and not any(buf)
    ask()
    while not req.test():
        time.sleep(0.001)
    assert req.done and req.wait() == (4, (1, conn.peer[1]), 0) and buf[:4] == b"late"

    buf = bytearray(32)
    req = ep.post_recv_into(buf)
    assert req.cancel() is False
    with pytest.raises(quiver.InvalidArgument):
        req.wait()
    buf.append(0)  # released
    ask()
    data, _ = ep.recv()
    assert data == b"after the cancel" and not any(buf)

    first, second = bytearray(32), bytearray(32)
    r1 = ep.post_recv_into(first)
    r2 = ep.post_recv_into(second)
    ask()
    cep.send(cconn, b"done")
    # r1 took the message (posting order); nothing comes for r2.
    while not r1.test():
        time.sleep(0.001)
    assert r1.cancel() is True and r1.wait() == (7, (1, conn.peer[1]), 0)
    assert first[:7] == b"arrived"
    assert r2.cancel() is False and not any(second)


def test_a_dropped_receive_is_cancelled(peer, control):
    """A posted receive dropped unfinished is cancelled: the next message goes to a later
    receive, and the dropped buffer is not written."""
    ep, conn = peer.ep, peer.conn
    cep, cconn = control
    if peer.rank == 1:
        assert cep.recv()[0] == b"send"
        ep.send(conn, b"for recv")
        return
    dropped = bytearray(16)
    req = ep.post_recv_into(dropped)
    del req
    cep.send(cconn, b"send")
    data, _ = ep.recv()
    assert data == b"for recv" and not any(dropped)


def test_asyncio_matching_recv_sleeps_on_the_descriptor(peer):
    """recv_matching_async for tag 2 while a message of tag 1 waits in the endpoint: it
    sleeps on the descriptor (armed with arm_matching) for the 0.5 s until its message
    comes, spending little CPU, and the tag-1 message is still there, in order, after."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        ep.send_tagged(conn, 1, b"other")
        time.sleep(0.5)
        ep.send_tagged(conn, 2, b"wanted")
        ep.send_tagged(conn, 1, b"other again")
        return
    # The tag-1 message is in the endpoint, unmatched, before the wait starts.
    assert ep.probe(1)[1] == 1

    async def main():
        return await ep.recv_matching_async(2)

    cpu, wall = time.process_time(), time.monotonic()
    data, src, tag = asyncio.run(main())
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert (data, tag) == (b"wanted", 2)
    assert wall > 0.3, f"received after {wall:.3f} s: the wait did not wait"
    assert cpu < 0.2, f"{cpu:.3f} s of CPU over a {wall:.3f} s wait: it polled"
    assert ep.recv_matching(1)[0] == b"other"
    assert ep.recv_matching(1)[0] == b"other again"
