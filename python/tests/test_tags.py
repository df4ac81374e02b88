"""Tagged messages: sends with a tag, receives and probes by tag, mask and source (MPI's
matching rules: one sender's matching messages in the order sent), replies by tag, and
the asyncio and error paths of the tagged calls."""

import asyncio
import time

import numpy as np
import pytest

import quiver

LIBRARY = 0xAB << 56
LIBRARY_MASK = 0xFF << 56

# (tag, payload) in the order rank 1 sends them.
TAGGED = [
    (5, b"five"),
    (7, b"seven"),
    (LIBRARY | 1, b"library one"),
    (7, b"seven again"),
    (LIBRARY | 2, b"library two"),
    (0, b"plain"),
    (2**64 - 1, b"the largest tag"),
    (9, np.arange(1 << 18, dtype=np.uint32)),  # 1 MiB: matched before it moves
]


def send_all(ep, conn):
    for tag, data in TAGGED:
        if tag == 0:
            ep.send(conn, data)
        else:
            ep.send_tagged(conn, tag, data)


def test_matching_by_tag_mask_and_source(peer):
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        send_all(ep, conn)
        ep.recv()  # rank 0 is done
        return
    me = (1, conn.peer[1])
    nobody = (1, conn.peer[1] + 1000)
    # Probe the last one: sized before it is taken (everything before it has arrived).
    src, tag, length = ep.probe(9, source=me)
    assert (src, tag, length) == (me, 9, 1 << 20)
    assert ep.try_probe(9) == (me, 9, 1 << 20)  # still there
    with pytest.raises(quiver.WouldBlock):
        ep.try_probe(8)
    with pytest.raises(quiver.WouldBlock):
        ep.try_recv_matching(source=nobody)
    # Too small: the message stays queued.
    small = bytearray(16)
    with pytest.raises(quiver.BufferTooSmall) as e:
        ep.recv_into_matching(small, 9)
    assert (e.value.message_len, e.value.buffer_len) == (1 << 20, 16)
    into = np.zeros(1 << 18, dtype=np.uint32)
    assert ep.recv_into_matching(into, 9, source=me) == (1 << 20, me, 9)
    assert np.array_equal(into, np.arange(1 << 18, dtype=np.uint32))
    # Exact tags out of the order sent; equal tags of one sender in the order sent.
    assert ep.recv_matching(7) == (b"seven", me, 7)
    assert ep.recv_matching(7, source=me) == (b"seven again", me, 7)
    assert ep.recv_matching(2**64 - 1) == (b"the largest tag", me, 2**64 - 1)
    # A mask: a library's messages by their high byte, in the order sent.
    assert ep.try_probe(LIBRARY, mask=LIBRARY_MASK) == (me, LIBRARY | 1, 11)
    assert ep.try_recv_matching(LIBRARY, mask=LIBRARY_MASK) == (b"library one", me, LIBRARY | 1)
    buf = bytearray(64)
    assert ep.recv_into_matching(buf, LIBRARY | 0xFFFF, mask=LIBRARY_MASK) == (11, me, LIBRARY | 2)
    assert bytes(buf[:11]) == b"library two"
    # A plain receive takes any tag: the earliest left; then any tag from the sender.
    assert ep.recv() == (b"five", me)
    assert ep.recv_matching(source=me) == (b"plain", me, 0)
    with pytest.raises(quiver.WouldBlock):
        ep.try_probe()
    ep.send(conn, b"done")


def test_tagged_request_and_reply(peer):
    """Rank 0 asks two questions at once and takes the answers in the other order by
    their tags; rank 1 answers each on the connection it came in on."""
    ep, conn = peer.ep, peer.conn
    request, answer = 1 << 56, 2 << 56
    if peer.rank == 1:
        for _ in range(2):
            data, src, tag = ep.recv_matching(request, mask=0xFF << 56)
            back = ep.reply_connection(src)
            ep.send_tagged(back, answer | (tag & 0xFFFF), data[::-1])
        return
    ep.send_tagged(conn, request | 1, b"first")
    ep.send_tagged(conn, request | 2, b"second")
    assert ep.recv_matching(answer | 2, source=conn.peer) == (b"dnoces", conn.peer, answer | 2)
    assert ep.recv_matching(answer | 1, source=conn.peer) == (b"tsrif", conn.peer, answer | 1)


def test_tagged_asyncio_and_try_send(peer):
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        time.sleep(0.2)
        while True:
            try:
                ep.try_send_tagged(conn, 11, b"eleven")
                break
            except quiver.WouldBlock:
                time.sleep(0.001)
        ep.send_tagged(conn, 12, np.arange(10, dtype=np.int64))
        return

    async def main():
        twelve = np.zeros(10, dtype=np.int64)
        # The later one first: the earlier waits in the endpoint meanwhile.
        got_twelve = await ep.recv_into_matching_async(twelve, 12)
        got_eleven = await ep.recv_matching_async(11, source=conn.peer)
        return got_twelve, twelve, got_eleven

    got_twelve, twelve, got_eleven = asyncio.run(main())
    assert got_twelve == (80, conn.peer, 12)
    assert np.array_equal(twelve, np.arange(10, dtype=np.int64))
    assert got_eleven == (b"eleven", conn.peer, 11)


def test_tagged_argument_errors(peer):
    ep, conn = peer.ep, peer.conn
    with pytest.raises(quiver.InvalidArgument):
        ep.try_probe(mask=0xFF)  # a mask needs a tag
    with pytest.raises(OverflowError):
        ep.send_tagged(conn, -1, b"x")
    with pytest.raises(OverflowError):
        ep.send_tagged(conn, 2**64, b"x")
    with pytest.raises(BufferError):
        ep.recv_into_matching(b"read-only", 1)
    ep.timeout = 0.1
    with pytest.raises(quiver.Timeout):
        ep.probe(123)
    with pytest.raises(quiver.Timeout):
        ep.recv_matching(123)
