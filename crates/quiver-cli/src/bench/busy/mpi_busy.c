/*
 * mpi_busy: the algorithms of `quiver bench busy`, written against MPI, so that Open MPI
 * runs exactly what quiver's ranks run (crates/quiver-cli/src/bench/busy/worker.rs), with
 * any number of ranks:
 *
 *   mpirun -np N ./mpi_busy ALGORITHM:SIZE:ITERS ...
 *
 * pingpong  ranks 2k and 2k+1 ping-pong SIZE bytes (every pair at once; an odd last rank
 *           idles); rank 0's one-way time (round trip / 2).
 * ring      ring allreduce of SIZE/8 u64: a reduce-scatter, then an allgather, each N-1
 *           MPI_Sendrecv of one chunk to the right neighbour and from the left one; rank
 *           0's time per allreduce.
 * reqrep    rank 0 serves, every other rank is a client sending ITERS requests of SIZE
 *           bytes one at a time; the server answers whoever asks with SIZE bytes; the
 *           server's time per request of one client (its clients' mean round trip).
 *
 * Each point starts with a barrier, then ITERS/10 (at least 2) warm-up iterations whose
 * results are checked (a wrong one exits with status 3), a barrier, and ITERS timed ones.
 * SIZE is a multiple of 8. Output, from rank 0, one line per point:
 *   RESULT algorithm=A size=S iters=I time_us=T
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_PING 1
#define TAG_RING 2
#define TAG_REQUEST 3
#define TAG_REPLY 4

static int rank, size;

static void fail(const char *what, long iteration)
{
	fprintf(stderr, "mpi_busy: rank %d: wrong result in %s (iteration %ld)\n", rank, what,
		iteration);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

static long warmup_of(long iters)
{
	return iters / 10 < 2 ? 2 : iters / 10;
}

static void pingpong(char *buffer, int bytes, long iters, double *elapsed)
{
	int partner = rank ^ 1;
	long warmup = warmup_of(iters);
	double start = 0.0;
	for (long i = 0; i < warmup + iters; i++) {
		int check = i < warmup;
		if (i == warmup) {
			MPI_Barrier(MPI_COMM_WORLD);
			start = MPI_Wtime();
		}
		if (partner >= size)
			continue;
		if (rank % 2 == 0) {
			if (check)
				memset(buffer, (int)((i + 1) & 0xff), (size_t)bytes);
			MPI_Send(buffer, bytes, MPI_BYTE, partner, TAG_PING, MPI_COMM_WORLD);
			MPI_Recv(buffer, bytes, MPI_BYTE, partner, TAG_PING, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			if (check)
				for (int k = 0; k < bytes; k++)
					if ((unsigned char)buffer[k] != ((i + 2) & 0xff))
						fail("pingpong", i);
		} else {
			MPI_Recv(buffer, bytes, MPI_BYTE, partner, TAG_PING, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			if (check) {
				for (int k = 0; k < bytes; k++)
					if ((unsigned char)buffer[k] != ((i + 1) & 0xff))
						fail("pingpong", i);
				memset(buffer, (int)((i + 2) & 0xff), (size_t)bytes);
			}
			MPI_Send(buffer, bytes, MPI_BYTE, partner, TAG_PING, MPI_COMM_WORLD);
		}
	}
	*elapsed = (MPI_Wtime() - start) / (double)iters / 2.0;
}

static uint64_t value(int r, size_t i, long round)
{
	return ((uint64_t)r + 1) * ((uint64_t)i + 1) + ((uint64_t)round << 32);
}

static size_t chunk_start(int c, size_t n)
{
	return (size_t)c * n / (size_t)size;
}

static void exchange(uint64_t *data, size_t n, uint64_t *incoming, int send, int recv)
{
	size_t send_lo = chunk_start(send, n), send_hi = chunk_start(send + 1, n);
	size_t recv_lo = chunk_start(recv, n), recv_hi = chunk_start(recv + 1, n);
	MPI_Sendrecv(data + send_lo, (int)((send_hi - send_lo) * 8), MPI_BYTE, (rank + 1) % size,
		     TAG_RING, incoming, (int)((recv_hi - recv_lo) * 8), MPI_BYTE,
		     (rank + size - 1) % size, TAG_RING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void allreduce(uint64_t *data, size_t n, uint64_t *incoming)
{
	for (int step = 0; step < size - 1; step++) {
		int send = (rank + size - step) % size, recv = (rank + 2 * size - step - 1) % size;
		exchange(data, n, incoming, send, recv);
		size_t lo = chunk_start(recv, n), hi = chunk_start(recv + 1, n);
		for (size_t k = lo; k < hi; k++)
			data[k] += incoming[k - lo];
	}
	for (int step = 0; step < size - 1; step++) {
		int send = (rank + 1 + size - step) % size, recv = (rank + size - step) % size;
		exchange(data, n, incoming, send, recv);
		size_t lo = chunk_start(recv, n), hi = chunk_start(recv + 1, n);
		memcpy(data + lo, incoming, (hi - lo) * 8);
	}
}

static void ring(int bytes, long iters, double *elapsed)
{
	size_t n = (size_t)bytes / 8;
	uint64_t *data = malloc(n * 8), *incoming = malloc((n / (size_t)size + 1) * 8);
	if (!data || !incoming)
		MPI_Abort(MPI_COMM_WORLD, 1);
	long warmup = warmup_of(iters);
	double start = 0.0;
	for (long round = 0; round < warmup; round++) {
		for (size_t i = 0; i < n; i++)
			data[i] = value(rank, i, round);
		allreduce(data, n, incoming);
		for (size_t i = 0; i < n; i++) {
			uint64_t want = 0;
			for (int r = 0; r < size; r++)
				want += value(r, i, round);
			if (data[i] != want)
				fail("ring", round);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	start = MPI_Wtime();
	for (long round = 0; round < iters; round++)
		allreduce(data, n, incoming);
	*elapsed = (MPI_Wtime() - start) / (double)iters;
	free(data);
	free(incoming);
}

static uint64_t answer(uint64_t request)
{
	return request * 0x9e3779b97f4a7c15ULL ^ 0x5bd1e995ULL;
}

static void reqrep(char *buffer, int bytes, long iters, double *elapsed)
{
	long warmup = warmup_of(iters);
	double start = 0.0;
	for (int phase = 0; phase < 2; phase++) {
		long count = phase == 0 ? warmup : iters;
		if (phase == 1) {
			MPI_Barrier(MPI_COMM_WORLD);
			start = MPI_Wtime();
		}
		if (rank == 0) {
			for (long i = 0; i < count * (size - 1); i++) {
				MPI_Status status;
				uint64_t word;
				MPI_Recv(buffer, bytes, MPI_BYTE, MPI_ANY_SOURCE, TAG_REQUEST,
					 MPI_COMM_WORLD, &status);
				memcpy(&word, buffer, 8);
				word = answer(word);
				memcpy(buffer, &word, 8);
				MPI_Send(buffer, bytes, MPI_BYTE, status.MPI_SOURCE, TAG_REPLY,
					 MPI_COMM_WORLD);
			}
		} else {
			for (long i = 0; i < count; i++) {
				uint64_t request = ((uint64_t)rank << 48) ^ (uint64_t)i, word;
				memcpy(buffer, &request, 8);
				MPI_Send(buffer, bytes, MPI_BYTE, 0, TAG_REQUEST, MPI_COMM_WORLD);
				MPI_Recv(buffer, bytes, MPI_BYTE, 0, TAG_REPLY, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				memcpy(&word, buffer, 8);
				if (phase == 0 && word != answer(request))
					fail("reqrep", i);
			}
		}
	}
	*elapsed = (MPI_Wtime() - start) / (double)iters;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int a = 1; a < argc; a++) {
		char algorithm[16];
		long bytes, iters;
		if (sscanf(argv[a], "%15[a-z]:%ld:%ld", algorithm, &bytes, &iters) != 3 ||
		    bytes < 8 || bytes % 8 != 0 || bytes > (1L << 30) || iters < 1) {
			if (rank == 0)
				fprintf(stderr, "mpi_busy: bad point %s\n", argv[a]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		char *buffer = malloc((size_t)bytes);
		if (!buffer)
			MPI_Abort(MPI_COMM_WORLD, 1);
		memset(buffer, 0, (size_t)bytes);
		double elapsed = 0.0;
		MPI_Barrier(MPI_COMM_WORLD);
		if (strcmp(algorithm, "pingpong") == 0)
			pingpong(buffer, (int)bytes, iters, &elapsed);
		else if (strcmp(algorithm, "ring") == 0)
			ring((int)bytes, iters, &elapsed);
		else if (strcmp(algorithm, "reqrep") == 0)
			reqrep(buffer, (int)bytes, iters, &elapsed);
		else
			MPI_Abort(MPI_COMM_WORLD, 2);
		if (rank == 0) {
			printf("RESULT algorithm=%s size=%ld iters=%ld time_us=%.4f\n", algorithm,
			       bytes, iters, elapsed * 1e6);
			fflush(stdout);
		}
		free(buffer);
	}
	MPI_Finalize();
	return 0;
}
