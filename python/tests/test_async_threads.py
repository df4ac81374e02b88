"""asyncio receives through the endpoint's descriptor, and threads that each drive their
own endpoint while blocking calls release the GIL."""

import asyncio
import threading
import time

import numpy as np


def test_asyncio_recv(peer):
    """recv_async waits on the descriptor: the event loop keeps running other tasks."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        time.sleep(0.3)
        ep.send(conn, b"late message")
        ep.send(conn, np.arange(1000, dtype=np.uint16))
        return

    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        data, src = await ep.recv_async()
        into = np.zeros(1000, dtype=np.uint16)
        n, _ = await ep.recv_into_async(into)
        done.set()
        await task
        return data, src, n, into, ticks

    data, src, n, into, ticks = asyncio.run(main())
    assert data == b"late message" and src == (1, conn.peer[1])
    assert n == 2000 and np.array_equal(into, np.arange(1000, dtype=np.uint16))
    assert ticks >= 5, f"the event loop ran only {ticks} ticks while waiting"


THREADS = 4
MESSAGES = 200


def test_threads_each_with_an_endpoint(ctx, ports):
    """THREADS threads per rank, each with its own endpoint connected to the same-numbered
    thread's endpoint on the other rank, ping-pong verified messages at once."""
    base = [ports() for _ in range(THREADS)]
    errors = []

    def worker(i):
        try:
            ep = ctx.endpoint(base[i])
            ep.timeout = 30
            conn = ep.connect((1 - ctx.rank, base[i]))
            buf = np.empty(4096, dtype=np.uint8)
            for m in range(MESSAGES):
                msg = np.full(100 + i * 1000 + m, (i * 31 + m) % 256, dtype=np.uint8)
                if ctx.rank == 0:
                    ep.send(conn, msg)
                    n, _ = ep.recv_into(buf)
                else:
                    n, _ = ep.recv_into(buf)
                    ep.send(conn, buf[:n])
                assert n == len(msg) and np.array_equal(buf[:n], msg), (i, m)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_blocking_calls_release_the_gil(peer):
    """While one thread blocks in recv, another thread runs Python code."""
    ep, conn = peer.ep, peer.conn
    if peer.rank == 1:
        time.sleep(0.5)
        ep.send(conn, b"wake up")
        return
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    data, _ = ep.recv()  # blocks about 0.5 s
    stop.set()
    counter.join()
    assert data == b"wake up"
    assert counted[0] > 1000, f"the other thread counted only {counted[0]} while recv blocked"
