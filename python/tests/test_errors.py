"""Each error kind raises its exception class; the pairs of processes started by hand
(dead peer, wrong key, no job) run on rank 0 only."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import quiver
from conftest import barrier


def test_would_block_and_buffer_too_small(peer):
    ep, conn = peer.ep, peer.conn
    if peer.rank == 0:
        ep.send(conn, bytes(range(100)))
        ep.recv()  # rank 1 is done
    else:
        small = bytearray(10)
        while True:
            try:
                ep.try_recv_into(small)
                pytest.fail("a 100-byte message fitted 10 bytes")
            except quiver.WouldBlock:
                time.sleep(0.001)
            except quiver.BufferTooSmall as e:
                assert (e.message_len, e.buffer_len) == (100, 10)
                assert "too small" in str(e)
                assert isinstance(e, quiver.QuiverError)
                break
        # The message was kept: a larger buffer takes it.
        big = bytearray(100)
        n, _ = ep.recv_into(big)
        assert n == 100 and bytes(big) == bytes(range(100))
        ep.send(conn, b"done")


def test_timeout(peer):
    peer.ep.timeout = 0.2
    assert peer.ep.timeout == pytest.approx(0.2)
    start = time.monotonic()
    with pytest.raises(quiver.Timeout):
        peer.ep.recv()
    assert time.monotonic() - start >= 0.2
    peer.ep.timeout = None
    assert peer.ep.timeout is None
    with pytest.raises(quiver.InvalidArgument):
        peer.ep.timeout = -1


def test_invalid_arguments(ctx, peer):
    with pytest.raises(quiver.InvalidArgument):
        peer.ep.connect((ctx.size + 5, 0))  # no such rank
    with pytest.raises(quiver.InvalidArgument):
        ctx.endpoint(1)  # the control endpoint's port is open already
    with pytest.raises(BufferError):
        peer.ep.recv_into(b"read-only bytes")
    with pytest.raises(TypeError):
        peer.ep.send(peer.conn, 12345)


def test_peer_closed_and_closed_connection(ctx, control, ports):
    """Rank 1 closes its connection (later sends on it: InvalidArgument), then drops its
    endpoint; rank 0's sends to it end in PeerClosed naming it."""
    port = ports()
    ep = ctx.endpoint(port)
    ep.timeout = 30
    conn = ep.connect((1 - ctx.rank, port))
    if ctx.rank == 1:
        assert ep.recv()[0] == b"bye"
        ep.close(conn)
        with pytest.raises(quiver.InvalidArgument):
            ep.send(conn, b"after close")
        del ep  # the endpoint closes: its peers see the end
    else:
        ep.send(conn, b"bye")
        chunk = bytes(64 << 10)
        with pytest.raises((quiver.PeerClosed, quiver.Unreachable)) as info:
            for _ in range(100_000):
                ep.send(conn, chunk)
                time.sleep(0.0001)
        assert info.value.peer == (1, port)
    barrier(control)


def test_busy_endpoint_from_another_thread(peer):
    """A second thread in an endpoint another thread blocks in is refused at once."""
    ep = peer.ep
    ep.timeout = 1.0
    outcome = []
    blocked = threading.Thread(target=lambda: outcome.append(_catch(ep.recv)))
    blocked.start()
    time.sleep(0.2)
    with pytest.raises(quiver.EndpointBusy):
        ep.try_recv()
    blocked.join()
    assert isinstance(outcome[0], quiver.Timeout)


def _catch(f):
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e


PAIR = textwrap.dedent(
    """
    import os, sys, time
    import quiver
    mode = sys.argv[1]
    ctx = quiver.Context.from_env()
    ep = ctx.endpoint(0)
    ep.timeout = 20
    if mode == "dead":
        conn = ep.connect((1 - ctx.rank, 0))
        if ctx.rank == 1:
            ep.send(conn, b"last words")
            ep.recv()                    # rank 0's go
            os._exit(0)                  # dies without closing anything
        ep.recv()
        ep.send(conn, b"go")
        try:
            ep.recv()
            print("no error")
        except quiver.PeerDead as e:
            print("PeerDead", e.peer)
    elif mode == "wrong-key":
        if ctx.rank == 0:
            time.sleep(4)
        else:
            try:
                ep.connect((0, 0))
                print("connected")
            except quiver.WrongKey as e:
                print("WrongKey", e.peer)
    """
)


def _pair(tmp_path, mode, keys, extra_env=None):
    """Runs PAIR as ranks 0 and 1 of a job started by hand; returns their outputs."""
    script = tmp_path / "pair.py"
    script.write_text(PAIR)
    job_id = "%016x" % (os.getpid() << 8 | len(mode))
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
        env.update(
            QUIVER_RANK=str(rank),
            QUIVER_SIZE="2",
            QUIVER_JOB_ID=job_id,
            QUIVER_JOB_KEY="%064x" % keys[rank],
            QUIVER_CONNECT_TIMEOUT_MS="3000",
        )
        env.update(extra_env or {})
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), mode],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return [p.communicate(timeout=60) for p in procs]


def test_peer_dead(ctx, tmp_path):
    if ctx.rank != 0:
        return
    (out0, err0), _ = _pair(tmp_path, "dead", (7, 7))
    assert out0.strip() == "PeerDead (1, 0)", err0


def test_wrong_key(ctx, tmp_path):
    if ctx.rank != 0:
        return
    _, (out1, err1) = _pair(tmp_path, "wrong-key", (1, 2))
    assert out1.strip() == "WrongKey (0, 0)", err1


def test_config_error_without_a_job(ctx):
    if ctx.rank != 0:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUIVER_")}
    code = "import quiver\ntry:\n quiver.Context.from_env()\nexcept quiver.ConfigError as e:\n print('ConfigError')"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "ConfigError", out.stderr
