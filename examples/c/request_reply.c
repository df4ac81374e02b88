/* A request/reply server through quiver's C API: rank 0 serves, every other rank sends
 * REQUESTS requests (two 64-bit numbers) and checks each answer (their sum). The server
 * answers each client with quiver_reply, on the connection the request came in on: it
 * never connects to its clients. A client's last request is a zero-length "done".
 *
 *   cc -O2 request_reply.c $(pkg-config --cflags --libs quiver) -o request_reply
 *   quiver run -n 2 -- ./request_reply [REQUESTS]           (default 1000)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <quiver.h>

static void check(quiver_status status, const char *what) {
    if (status != QUIVER_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, quiver_strerror(status),
                quiver_last_error_message());
        exit(1);
    }
}

static int serve(quiver_endpoint ep, uint32_t clients) {
    uint64_t served = 0;
    while (clients > 0) {
        uint64_t request[2];
        size_t len;
        quiver_addr src;
        check(quiver_recv(ep, request, sizeof request, &len, &src), "quiver_recv");
        if (len == 0) {
            clients--; /* "done" */
            continue;
        }
        if (len != sizeof request) {
            fprintf(stderr, "server: a request of %zu bytes from rank %u\n", len, src.rank);
            return 1;
        }
        uint64_t sum = request[0] + request[1];
        check(quiver_reply(ep, src, &sum, sizeof sum), "quiver_reply");
        served++;
    }
    printf("server: answered %" PRIu64 " requests\n", served);
    return 0;
}

static int ask(quiver_endpoint ep, uint32_t rank, long requests) {
    quiver_conn server;
    check(quiver_connect(ep, (quiver_addr){.rank = 0, .port = 0}, &server), "quiver_connect");
    for (long i = 0; i < requests; i++) {
        uint64_t request[2] = {(uint64_t)i * 1000003u, (uint64_t)rank << 32};
        check(quiver_send(ep, server, request, sizeof request), "quiver_send");
        uint64_t sum;
        size_t len;
        check(quiver_recv(ep, &sum, sizeof sum, &len, NULL), "quiver_recv");
        if (len != sizeof sum || sum != request[0] + request[1]) {
            fprintf(stderr, "client %u: wrong answer to request %ld\n", rank, i);
            return 1;
        }
    }
    check(quiver_send(ep, server, NULL, 0), "quiver_send (done)");
    return 0;
}

int main(int argc, char **argv) {
    long requests = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    quiver_context ctx;
    check(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank, ranks;
    check(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    check(quiver_context_size(ctx, &ranks), "quiver_context_size");
    quiver_endpoint ep;
    check(quiver_endpoint_open(ctx, 0, &ep), "quiver_endpoint_open");
    int result = rank == 0 ? serve(ep, ranks - 1) : ask(ep, rank, requests);
    check(quiver_endpoint_free(ep), "quiver_endpoint_free");
    check(quiver_context_free(ctx), "quiver_context_free");
    return result;
}
