/* Ping-pong between rank 0 and rank 1 through quiver's C API: rank 0 sends SIZE bytes,
 * rank 1 sends them back, ITERATIONS times; every byte is checked, and rank 0 prints the
 * one-way latency.
 *
 *   cc -O2 pingpong.c $(pkg-config --cflags --libs quiver) -o pingpong
 *   quiver run -n 2 -- ./pingpong [SIZE] [ITERATIONS]        (default 8 B, 10000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <quiver.h>

/* Prints the failed call, its status and quiver's message, and exits. */
static void check(quiver_status status, const char *what) {
    if (status != QUIVER_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, quiver_strerror(status),
                quiver_last_error_message());
        exit(1);
    }
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 8;
    long iterations = argc > 2 ? strtol(argv[2], NULL, 10) : 10000;

    quiver_context ctx;
    check(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank, ranks;
    check(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    check(quiver_context_size(ctx, &ranks), "quiver_context_size");
    if (ranks != 2) {
        fprintf(stderr, "pingpong runs with 2 ranks (quiver run -n 2), not %u\n", ranks);
        return 2;
    }
    quiver_endpoint ep;
    check(quiver_endpoint_open(ctx, 0, &ep), "quiver_endpoint_open");
    quiver_addr peer = {.rank = 1 - rank, .port = 0};
    quiver_conn conn;
    check(quiver_connect(ep, peer, &conn), "quiver_connect");

    unsigned char *out = malloc(size ? size : 1);
    unsigned char *in = malloc(size ? size : 1);
    if (!out || !in) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    double start = 0;
    for (long i = -1; i < iterations; i++) {
        if (i == 0) {
            start = seconds(); /* round -1 warms the connection up */
        }
        size_t len;
        quiver_addr src;
        if (rank == 0) {
            for (size_t b = 0; b < size; b++) {
                out[b] = (unsigned char)(b + (size_t)i);
            }
            check(quiver_send(ep, conn, out, size), "quiver_send");
            check(quiver_recv(ep, in, size, &len, &src), "quiver_recv");
            if (len != size || (size && memcmp(in, out, size) != 0)) {
                fprintf(stderr, "round %ld: the echo differs from what was sent\n", i);
                return 1;
            }
        } else {
            check(quiver_recv(ep, in, size, &len, &src), "quiver_recv");
            if (len != size || src.rank != peer.rank) {
                fprintf(stderr, "round %ld: got %zu bytes from rank %u\n", i, len, src.rank);
                return 1;
            }
            check(quiver_send(ep, conn, in, len), "quiver_send");
        }
    }
    double elapsed = seconds() - start;
    if (rank == 0 && iterations > 0) {
        printf("pingpong: %zu B, %ld round trips, %.3f us one-way\n", size, iterations,
               elapsed / (double)iterations / 2 * 1e6);
    }
    free(out);
    free(in);
    check(quiver_endpoint_free(ep), "quiver_endpoint_free");
    check(quiver_context_free(ctx), "quiver_context_free");
    return 0;
}
