/* A tagged request/reply server through quiver's C API: rank 0 serves, every other rank
 * sends REQUESTS requests (two 64-bit numbers) and checks each answer (their sum).
 *
 * Every message carries a tag: its kind in the high byte (REQUEST, ANSWER, DONE) and the
 * request's number in the rest. The server probes for the next message of any kind from
 * any client (quiver_probe), receives exactly that one (quiver_recv_matching with its
 * sender and tag), and answers on the connection the request came in on
 * (quiver_reply_connection: it never connects to its clients) with the ANSWER tag of the
 * same number. A client keeps two requests in flight and takes the second answer first,
 * by its tag (quiver_recv_matching): the first waits in the endpoint until it is asked for.
 * A client's last message is a zero-length DONE.
 *
 *   cc -O2 request_reply.c $(pkg-config --cflags --libs quiver) -o request_reply
 *   quiver run -n 2 -- ./request_reply [REQUESTS]           (default 1000)
 *
 * Tags travel over shm and tcp (not udp yet): QUIVER_TRANSPORTS=shm,tcp.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <quiver.h>

#define KIND_MASK ((uint64_t)0xff << 56)
#define REQUEST ((uint64_t)1 << 56)
#define ANSWER ((uint64_t)2 << 56)
#define DONE ((uint64_t)3 << 56)

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
        /* What comes next, from anyone, of any kind: sized and sorted before it is taken. */
        quiver_envelope next;
        quiver_status status = quiver_probe(ep, NULL, 0, QUIVER_TAG_ANY, &next);
        if (status == QUIVER_ERR_PEER_CLOSED) {
            /* A client that said it was done has gone (an any-source call reports each
             * close once); the others, perhaps not even connected yet, go on. */
            continue;
        }
        check(status, "quiver_probe");
        uint64_t request[2];
        quiver_envelope got;
        check(quiver_recv_matching(ep, &next.source, next.tag, QUIVER_TAG_EXACT, request,
                                   sizeof request, &got),
              "quiver_recv_matching");
        if (got.tag != next.tag || got.source.rank != next.source.rank || got.len != next.len) {
            fprintf(stderr, "server: the probed message and the received one differ\n");
            return 1;
        }
        if ((got.tag & KIND_MASK) == DONE) {
            clients--;
            continue;
        }
        if ((got.tag & KIND_MASK) != REQUEST || got.len != sizeof request) {
            fprintf(stderr, "server: tag %#" PRIx64 ", %zu bytes from rank %u\n", got.tag,
                    got.len, got.source.rank);
            return 1;
        }
        uint64_t sum = request[0] + request[1];
        quiver_conn back;
        check(quiver_reply_connection(ep, got.source, &back), "quiver_reply_connection");
        check(quiver_send_tagged(ep, back, ANSWER | (got.tag & ~KIND_MASK), &sum, sizeof sum),
              "quiver_send_tagged (answer)");
        served++;
    }
    printf("server: answered %" PRIu64 " requests\n", served);
    return 0;
}

/* Sends request `i` (two numbers whose sum the server returns). */
static void ask_one(quiver_endpoint ep, quiver_conn server, uint32_t rank, long i) {
    uint64_t request[2] = {(uint64_t)i * 1000003u, (uint64_t)rank << 32};
    check(quiver_send_tagged(ep, server, REQUEST | (uint64_t)i, request, sizeof request),
          "quiver_send_tagged (request)");
}

/* Receives the answer to request `i` and only that one, from the server; checks it. */
static int answer(quiver_endpoint ep, quiver_addr server, uint32_t rank, long i) {
    uint64_t sum;
    quiver_envelope got;
    check(quiver_recv_matching(ep, &server, ANSWER | (uint64_t)i, QUIVER_TAG_EXACT, &sum,
                               sizeof sum, &got),
          "quiver_recv_matching (answer)");
    if (got.tag != (ANSWER | (uint64_t)i) || got.len != sizeof sum ||
        sum != (uint64_t)i * 1000003u + ((uint64_t)rank << 32)) {
        fprintf(stderr, "client %u: wrong answer to request %ld\n", rank, i);
        return 1;
    }
    return 0;
}

static int ask(quiver_endpoint ep, uint32_t rank, long requests) {
    quiver_addr server_addr = {.rank = 0, .port = 0};
    quiver_conn server;
    check(quiver_connect(ep, server_addr, &server), "quiver_connect");
    for (long i = 0; i < requests; i += 2) {
        ask_one(ep, server, rank, i);
        if (i + 1 < requests) {
            ask_one(ep, server, rank, i + 1);
            /* The later answer first: the earlier one waits for its own receive. */
            if (answer(ep, server_addr, rank, i + 1)) {
                return 1;
            }
        }
        if (answer(ep, server_addr, rank, i)) {
            return 1;
        }
    }
    check(quiver_send_tagged(ep, server, DONE, NULL, 0), "quiver_send_tagged (done)");
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
