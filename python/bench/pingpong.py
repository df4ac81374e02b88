"""Ping-pong and bandwidth from Python: quiver against mpi4py and pyzmq, the same loop for
each (rank 0 sends, rank 1 sends back; numpy buffers received in place where the library
allows it). A benchmark for a quiet machine, not a test: scripts/bench-bindings runs it.

    quiver run -n 2 --bind core -- python python/bench/pingpong.py quiver 8 100000
    mpirun -n 2 --bind-to core python python/bench/pingpong.py mpi4py 8 100000
    python python/bench/pingpong.py pyzmq 8 100000        (starts its second rank itself)
    quiver run -n 2 --bind core -- python python/bench/pingpong.py quiver-bw 1048576 2000

Prints one line: library, size, iterations, one-way latency in microseconds (ping-pong) or
bandwidth in MB/s (the -bw modes: rank 0 streams, rank 1 acknowledges once at the end).
"""

import os
import subprocess
import sys
import time

import numpy as np


def report(lib, size, iterations, seconds, bandwidth=False):
    if bandwidth:
        print(f"{lib}: {size} B x {iterations}: {size * iterations / seconds / 1e6:.1f} MB/s")
    else:
        print(f"{lib}: {size} B x {iterations}: {seconds / iterations / 2 * 1e6:.3f} us one-way")


def quiver_pingpong(size, iterations, bandwidth):
    import quiver

    ctx = quiver.Context.from_env()
    ep = ctx.endpoint(0)
    conn = ep.connect((1 - ctx.rank, 0))
    out = np.full(size, 7, dtype=np.uint8)
    into = np.empty(max(size, 1), dtype=np.uint8)
    ack = np.empty(1, dtype=np.uint8)
    for warm in (True, False):
        rounds = min(iterations, 1000) if warm else iterations
        start = time.perf_counter()
        if bandwidth:
            if ctx.rank == 0:
                for _ in range(rounds):
                    ep.send(conn, out)
                ep.recv_into(ack)
            else:
                for _ in range(rounds):
                    ep.recv_into(into)
                ep.send(conn, ack)
        else:
            for _ in range(rounds):
                if ctx.rank == 0:
                    ep.send(conn, out)
                    ep.recv_into(into)
                else:
                    ep.recv_into(into)
                    ep.send(conn, out)
        elapsed = time.perf_counter() - start
    if ctx.rank == 0:
        report("quiver" + ("-bw" if bandwidth else ""), size, iterations, elapsed, bandwidth)


def mpi4py_pingpong(size, iterations, bandwidth):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    other = 1 - rank
    out = np.full(size, 7, dtype=np.uint8)
    into = np.empty(max(size, 1), dtype=np.uint8)
    ack = np.empty(1, dtype=np.uint8)
    for warm in (True, False):
        rounds = min(iterations, 1000) if warm else iterations
        comm.Barrier()
        start = time.perf_counter()
        if bandwidth:
            if rank == 0:
                for _ in range(rounds):
                    comm.Send(out, dest=other)
                comm.Recv(ack, source=other)
            else:
                for _ in range(rounds):
                    comm.Recv(into[:size], source=other)
                comm.Send(ack, dest=other)
        else:
            for _ in range(rounds):
                if rank == 0:
                    comm.Send(out, dest=other)
                    comm.Recv(into[:size], source=other)
                else:
                    comm.Recv(into[:size], source=other)
                    comm.Send(out, dest=other)
        elapsed = time.perf_counter() - start
    if rank == 0:
        report("mpi4py" + ("-bw" if bandwidth else ""), size, iterations, elapsed, bandwidth)


def pyzmq_pingpong(size, iterations, bandwidth):
    import zmq

    rank = int(os.environ.get("PINGPONG_RANK", "0"))
    path = os.environ.get("PINGPONG_IPC") or f"ipc:///tmp/quiver-pingpong-{os.getpid()}"
    child = None
    if rank == 0:
        env = dict(os.environ, PINGPONG_RANK="1", PINGPONG_IPC=path)
        child = subprocess.Popen([sys.executable, *sys.argv], env=env)
    context = zmq.Context()
    sock = context.socket(zmq.PAIR)
    if rank == 0:
        sock.bind(path)
    else:
        sock.connect(path)
    out = np.full(size, 7, dtype=np.uint8)
    for warm in (True, False):
        rounds = min(iterations, 1000) if warm else iterations
        start = time.perf_counter()
        if bandwidth:
            if rank == 0:
                for _ in range(rounds):
                    sock.send(out, copy=False)
                sock.recv()
            else:
                for _ in range(rounds):
                    sock.recv(copy=False)
                sock.send(b"a")
        else:
            for _ in range(rounds):
                if rank == 0:
                    sock.send(out, copy=False)
                    sock.recv(copy=False)
                else:
                    sock.recv(copy=False)
                    sock.send(out, copy=False)
        elapsed = time.perf_counter() - start
    if rank == 0:
        report("pyzmq" + ("-bw" if bandwidth else ""), size, iterations, elapsed, bandwidth)
        child.wait()
    sock.close(linger=0)
    context.term()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    mode = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    iterations = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    bandwidth = mode.endswith("-bw")
    lib = mode[: -len("-bw")] if bandwidth else mode
    runs = {"quiver": quiver_pingpong, "mpi4py": mpi4py_pingpong, "pyzmq": pyzmq_pingpong}
    if lib not in runs:
        print(f"unknown mode {mode!r}: quiver, mpi4py, pyzmq (each with -bw)", file=sys.stderr)
        sys.exit(2)
    runs[lib](size, iterations, bandwidth)


if __name__ == "__main__":
    main()
