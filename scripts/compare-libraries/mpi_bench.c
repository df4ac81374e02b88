/*
 * mpi_bench: the ping-pong, bandwidth and message-rate tests of `quiver bench`, written
 * against MPI, so that Open MPI can be measured the way quiver is (Debian ships no OSU
 * micro-benchmarks). Run with exactly two ranks:
 *
 *   mpirun -np 2 --bind-to core ./mpi_bench pingpong SIZE ITERS
 *   mpirun -np 2 --bind-to core ./mpi_bench bw SIZE WINDOWS
 *
 * pingpong: COUNT timed round trips (after COUNT/10 warm-up ones, at least 10); prints
 *   the median one-way time (round trip / 2) in microseconds, as quiver's pingpong does.
 * bw: COUNT timed windows (after COUNT/10 warm-up ones, at least 2) of 64 MPI_Isend
 *   of SIZE bytes from rank 0, MPI_Waitall, and a 1-byte answer from rank 1 per window
 *   (osu_bw's and quiver's bw method); prints MB/s (10^6 bytes per second) and the
 *   message rate in millions of messages per second.
 *
 * Output: one line per test, `RESULT test=... size=... value=... [rate_Mmsgs=...]`,
 * from rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void pingpong(int rank, char *buffer, int size, long iters)
{
	long warmup = iters / 10 < 10 ? 10 : iters / 10;
	double *times = malloc(sizeof(double) * (size_t)iters);
	if (!times)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (long i = 0; i < warmup + iters; i++) {
		double start = MPI_Wtime();
		if (rank == 0) {
			MPI_Send(buffer, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(buffer, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buffer, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(buffer, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
		}
		if (i >= warmup)
			times[i - warmup] = MPI_Wtime() - start;
	}
	if (rank == 0) {
		qsort(times, (size_t)iters, sizeof(double), compare_doubles);
		double median = times[iters / 2];
		printf("RESULT test=pingpong size=%d value=%.4f\n", size, median / 2.0 * 1e6);
	}
	free(times);
}

static void bandwidth(int rank, char *buffer, int size, long windows)
{
	long warmup = windows / 10 < 2 ? 2 : windows / 10;
	MPI_Request requests[WINDOW];
	char ack = 0;
	double start = 0.0;
	for (long w = 0; w < warmup + windows; w++) {
		if (w == warmup) {
			MPI_Barrier(MPI_COMM_WORLD);
			start = MPI_Wtime();
		}
		if (rank == 0) {
			for (int i = 0; i < WINDOW; i++)
				MPI_Isend(buffer, size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &requests[i]);
			MPI_Waitall(WINDOW, requests, MPI_STATUSES_IGNORE);
			MPI_Recv(&ack, 1, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			for (int i = 0; i < WINDOW; i++)
				MPI_Irecv(buffer, size, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &requests[i]);
			MPI_Waitall(WINDOW, requests, MPI_STATUSES_IGNORE);
			MPI_Send(&ack, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
		}
	}
	double seconds = MPI_Wtime() - start;
	if (rank == 0) {
		double messages = (double)windows * WINDOW;
		printf("RESULT test=bw size=%d value=%.1f rate_Mmsgs=%.4f\n", size,
		       messages * size / seconds / 1e6, messages / seconds / 1e6);
	}
}

static int run_test(int rank, const char *spec)
{
	char test[16];
	int size = 0;
	long count = 0;
	if (sscanf(spec, "%15[a-z]:%d:%ld", test, &size, &count) != 3 || size < 1 || count < 1)
		return 2;
	/* One buffer on each side for every message of a window, as osu_bw does. */
	char *buffer = calloc(1, (size_t)size);
	if (!buffer)
		MPI_Abort(MPI_COMM_WORLD, 1);
	int status = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	if (strcmp(test, "pingpong") == 0)
		pingpong(rank, buffer, size, count);
	else if (strcmp(test, "bw") == 0)
		bandwidth(rank, buffer, size, count);
	else
		status = 2;
	free(buffer);
	return status;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, ranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	if (argc < 2 || ranks != 2) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -np 2 %s TEST:SIZE:COUNT...\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (run_test(rank, argv[i]) != 0) {
			if (rank == 0)
				fprintf(stderr, "bad test %s (pingpong|bw:SIZE:COUNT)\n", argv[i]);
			MPI_Finalize();
			return 2;
		}
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
