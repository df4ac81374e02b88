"""Active messages from Python: handlers as callables, run in progress and receives, once
per message and in order per sender, with replies; payloads 0 B..16 MiB byte-verified;
an unknown handler id, a handler's exception, and the calls a handler may not make."""

import threading
import time

import numpy as np
import pytest

import quiver

SIZES = [0, 1, 8, 4095, 65536, 1 << 20, 16 << 20]
REQUEST, ANSWER = 1, 2


def pattern(size, seed):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def progress_until(ep, done, limit_s=30.0):
    deadline = time.monotonic() + limit_s
    while not done():
        ep.progress()
        assert time.monotonic() < deadline, "the handlers did not run in time"


def test_handlers_run_once_in_order_and_reply(peer):
    """Rank 1 sends every size to rank 0's handler, whose answer (an active message for
    rank 1's handler) carries the sequence number and a digest of what it saw."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        seen = []

        def request(m):
            assert isinstance(m, quiver.ActiveMessage)
            seq = int.from_bytes(m.header, "little")
            ok = m.payload == pattern(SIZES[seq], seq).tobytes()
            seen.append((seq, m.source, m.id, len(m.payload), ok))
            m.reply_am(ANSWER, m.header, bytes([ok]))

        ep.register_handler(REQUEST, request)
        progress_until(ep, lambda: len(seen) == len(SIZES))
        assert [s[0] for s in seen] == list(range(len(SIZES))), "in the order sent"
        for seq, src, id_, length, ok in seen:
            assert (src, id_, length, ok) == (conn.peer, REQUEST, SIZES[seq], True)
        assert ep.am_stats()["handled"] == len(SIZES)
        ep.recv()  # rank 1 has its answers
        return
    answers = []
    ep.register_handler(ANSWER, lambda m: answers.append((m.header, m.payload, m.source)))
    for seq, size in enumerate(SIZES):
        ep.send_am(conn, REQUEST, seq.to_bytes(8, "little"), pattern(size, seq))
    progress_until(ep, lambda: len(answers) == len(SIZES))
    assert answers == [
        (seq.to_bytes(8, "little"), b"\x01", conn.peer) for seq in range(len(SIZES))
    ]
    ep.send(conn, b"done")


def test_handlers_run_inside_a_blocking_receive(peer):
    """A receive that meets active messages runs their handlers and goes on to its
    message; the handler's plain reply arrives."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        count = []
        ep.register_handler(7, lambda m: (count.append(m.payload), m.reply(b"ack")))
        data, _ = ep.recv()  # runs the handlers of the messages before it
        assert data == b"plain" and count == [b"a", b"b"]
        return
    while True:
        try:
            ep.try_send_am(conn, 7, b"", b"a")
            break
        except quiver.WouldBlock:
            time.sleep(0.001)
    ep.send_am(conn, 7, b"", b"b")
    ep.send(conn, b"plain")
    assert [ep.recv()[0] for _ in range(2)] == [b"ack", b"ack"]


def test_unknown_handler_and_a_handler_exception(peer):
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:

        def broken(m):
            raise ValueError(f"handler saw {m.payload!r}")

        ep.register_handler(3, broken)
        ep.send(conn, b"ready")
        raised = []
        deadline = time.monotonic() + 30
        while len(raised) < 2:
            try:
                ep.progress()
            except (quiver.UnknownHandler, ValueError) as e:
                raised.append(e)
            assert time.monotonic() < deadline
        assert isinstance(raised[0], quiver.UnknownHandler)
        assert raised[0].peer == conn.peer
        assert isinstance(raised[1], ValueError) and "b'boom'" in str(raised[1])
        assert ep.am_stats()["unknown_handler"] == 1
        assert ep.unregister_handler(3) and not ep.unregister_handler(3)
        ep.send(conn, b"done")
        return
    ep.recv()
    ep.send_am(conn, 99, b"", b"nobody")  # no handler 99 there
    ep.send_am(conn, 3, b"", b"boom")
    ep.recv()


def test_what_a_handler_may_not_call(peer):
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        outcomes = []
        kept = []

        def rules(m):
            kept.append(m)
            for call in (ep.recv, ep.progress, lambda: ep.send(conn, b"x")):
                try:
                    call()
                    outcomes.append(None)
                except (quiver.InHandler, quiver.EndpointBusy) as e:
                    outcomes.append(type(e))
            # Another thread may not reply for the handler, even while it runs.
            other = []

            def reply_from_another_thread():
                try:
                    m.reply(b"from another thread")
                except quiver.InvalidArgument as e:
                    other.append(e)

            t = threading.Thread(target=reply_from_another_thread)
            t.start()
            t.join()
            outcomes.append(len(other))
            m.reply(b"after the rules")

        ep.register_handler(4, rules)
        progress_until(ep, lambda: kept)
        assert outcomes == [quiver.InHandler, quiver.EndpointBusy, quiver.InHandler, 1]
        with pytest.raises(quiver.InvalidArgument):
            kept[0].reply(b"too late")  # the handler has returned
        ep.recv()
        return
    ep.send_am(conn, 4, b"h")
    assert ep.recv()[0] == b"after the rules"
    ep.send(conn, b"done")


def test_handlers_with_threads_releasing_the_gil(peer):
    """While a blocking receive (GIL released) runs handlers, another Python thread runs."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        time.sleep(0.3)
        ep.send_am(conn, 8, b"", b"x")
        ep.send(conn, b"end")
        return
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)

    thread = threading.Thread(target=ticker)
    thread.start()
    ran = []
    ep.register_handler(8, lambda m: ran.append(threading.get_ident()))
    assert ep.recv()[0] == b"end"
    stop.set()
    thread.join()
    assert ran == [threading.get_ident()], "the handler runs on the receiving thread"
    assert len(ticks) >= 10
