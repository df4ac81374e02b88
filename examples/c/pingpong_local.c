/* Ping-pong between two endpoints of one process, driven by one thread: send on A, receive
 * on B, send on B, receive on A. Nothing crosses a core, so the time per round trip is the
 * calls' own cost (two sends and two receives) plus the shm ring's, without the cross-core
 * hand-off that dominates a 2-rank ping-pong; set against its Rust twin
 * (crates/quiver-ffi/examples/c_twin_pingpong_local.rs) it resolves what the C API adds
 * per call. Every byte is checked. Prints the best and the median of BATCHES batches of
 * ROUNDS round trips, in ns per round trip.
 *
 *   cc -O2 pingpong_local.c $(pkg-config --cflags --libs quiver) -o pingpong_local
 *   quiver run -n 1 -- ./pingpong_local [SIZE] [BATCHES] [ROUNDS]   (default 8 B, 15, 200000)
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

static double nanoseconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The endpoints and buffers of the loop. */
struct pair {
    quiver_endpoint a, b;
    quiver_conn a_to_b, b_to_a;
    unsigned char *out, *in;
    size_t size;
};

/* One round trip: A sends OUT to B, B sends what it got back, A checks it. */
static void round_trip(const struct pair *p, long round) {
    size_t len;
    quiver_addr src;
    p->out[0] = (unsigned char)round;
    check(quiver_send(p->a, p->a_to_b, p->out, p->size), "quiver_send (A)");
    check(quiver_recv(p->b, p->in, p->size, &len, &src), "quiver_recv (B)");
    if (len != p->size || src.port != 0) {
        fprintf(stderr, "round %ld: B got %zu bytes from port %u\n", round, len, src.port);
        exit(1);
    }
    check(quiver_send(p->b, p->b_to_a, p->in, len), "quiver_send (B)");
    check(quiver_recv(p->a, p->in, p->size, &len, &src), "quiver_recv (A)");
    if (len != p->size || src.port != 1 || memcmp(p->in, p->out, p->size) != 0) {
        fprintf(stderr, "round %ld: the echo differs from what was sent\n", round);
        exit(1);
    }
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 8;
    long batches = argc > 2 ? strtol(argv[2], NULL, 10) : 15;
    long rounds = argc > 3 ? strtol(argv[3], NULL, 10) : 200000;
    if (size == 0 || batches < 1 || rounds < 1) {
        fprintf(stderr, "usage: pingpong_local [SIZE >= 1] [BATCHES >= 1] [ROUNDS >= 1]\n");
        return 2;
    }

    quiver_context ctx;
    check(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank;
    check(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    struct pair p = {.size = size, .out = malloc(size), .in = malloc(size)};
    if (!p.out || !p.in) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t b = 0; b < size; b++) {
        p.out[b] = (unsigned char)(b * 7 + 1);
    }
    check(quiver_endpoint_open(ctx, 0, &p.a), "quiver_endpoint_open (A)");
    check(quiver_endpoint_open(ctx, 1, &p.b), "quiver_endpoint_open (B)");
    check(quiver_connect(p.a, (quiver_addr){.rank = rank, .port = 1}, &p.a_to_b),
          "quiver_connect (A to B)");
    check(quiver_connect(p.b, (quiver_addr){.rank = rank, .port = 0}, &p.b_to_a),
          "quiver_connect (B to A)");

    double *per_round_trip = malloc((size_t)batches * sizeof(double));
    if (!per_round_trip) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (long r = 0; r < rounds; r++) { /* a batch to warm up, not counted */
        round_trip(&p, r);
    }
    for (long batch = 0; batch < batches; batch++) {
        double start = nanoseconds();
        for (long r = 0; r < rounds; r++) {
            round_trip(&p, r);
        }
        per_round_trip[batch] = (nanoseconds() - start) / (double)rounds;
    }
    qsort(per_round_trip, (size_t)batches, sizeof(double), by_value);
    const char *name = strrchr(argv[0], '/');
    printf("pingpong_local (C, %s): %zu B, %ld batches of %ld round trips, %.1f ns best, "
           "%.1f ns median per round trip\n",
           name ? name + 1 : argv[0], size, batches, rounds, per_round_trip[0], per_round_trip[batches / 2]);
    free(per_round_trip);
    free(p.out);
    free(p.in);
    check(quiver_endpoint_free(p.a), "quiver_endpoint_free (A)");
    check(quiver_endpoint_free(p.b), "quiver_endpoint_free (B)");
    check(quiver_context_free(ctx), "quiver_context_free");
    return 0;
}
