"""Round trips of every size from every kind of buffer, byte-verified."""

import numpy as np
import pytest

SIZES = [0, 1, 8, 63, 64, 4095, 4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
KINDS = ["bytes", "bytearray", "memoryview", "numpy"]


def payload(size, seed):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def as_kind(array, kind):
    if kind == "bytes":
        return array.tobytes()
    if kind == "bytearray":
        return bytearray(array.tobytes())
    if kind == "memoryview":
        # A slice of a larger buffer: sent from where it lies, not copied first.
        backing = bytearray(len(array) + 16)
        backing[8 : 8 + len(array)] = array.tobytes()
        return memoryview(backing)[8 : 8 + len(array)]
    return array


@pytest.mark.parametrize("kind", KINDS)
def test_round_trips_every_size(peer, kind):
    """Rank 0 sends each size from `kind`; rank 1 receives into one buffer and echoes the
    message back with reply; rank 0 receives the echo into a numpy array and compares."""
    ep, conn = peer.ep, peer.conn
    biggest = max(SIZES)
    if peer.rank == 0:
        back = np.empty(biggest, dtype=np.uint8)
        for seed, size in enumerate(SIZES):
            sent = payload(size, seed)
            ep.send(conn, as_kind(sent, kind))
            n, src = ep.recv_into(back)
            assert (n, src) == (size, (1, conn.peer[1]))
            assert np.array_equal(back[:n], sent), f"{kind} {size} B: the echo differs"
    else:
        buf = bytearray(biggest)
        view = memoryview(buf)
        for size in SIZES:
            n, src = ep.recv_into(buf)
            assert n == size
            ep.reply(src, view[:n])


def test_recv_returns_bytes(peer):
    ep, conn = peer.ep, peer.conn
    for seed, size in enumerate([0, 8, 100_000, 8 << 20]):
        if peer.rank == 0:
            ep.send(conn, payload(size, seed))
        else:
            data, src = ep.recv()
            assert isinstance(data, bytes)
            assert src == (0, conn.peer[1])
            assert data == payload(size, seed).tobytes()


def test_typed_numpy_arrays(peer):
    """A float64 array is sent as its bytes and received straight into another array."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        ep.send(conn, np.linspace(0.0, 1.0, 1000))
        ep.send(conn, np.arange(12, dtype=np.int32).reshape(3, 4))
    else:
        got = np.zeros(1000)
        n, _ = ep.recv_into(got)
        assert n == 8000 and np.array_equal(got, np.linspace(0.0, 1.0, 1000))
        grid = np.zeros((3, 4), dtype=np.int32)
        n, _ = ep.recv_into(grid)
        assert n == 48 and np.array_equal(grid, np.arange(12, dtype=np.int32).reshape(3, 4))


def test_non_contiguous_array_is_refused(peer):
    """A strided view has no contiguous bytes to send without a copy: numpy refuses to
    export it as one (ValueError; other exporters raise BufferError)."""
    strided = np.arange(100, dtype=np.uint8)[::2]
    with pytest.raises((BufferError, ValueError)):
        peer.ep.send(peer.conn, strided)


def test_reply_connection_and_try_calls(peer):
    """try_recv with nothing queued raises WouldBlock; the answer goes back on the
    connection the request came in on (reply_connection), without connecting back."""
    import quiver

    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        ep.try_send(conn, b"ping")
        data, _ = ep.recv()
        assert data == b"pong"
    else:
        data, src = ep.recv()
        assert data == b"ping"
        # Rank 0 waits for the answer: nothing more can arrive now.
        with pytest.raises(quiver.WouldBlock):
            ep.try_recv()
        with pytest.raises(quiver.WouldBlock):
            ep.try_recv_into(bytearray(4))
        back = ep.reply_connection(src)
        assert back.peer == src
        ep.send(back, b"pong")
