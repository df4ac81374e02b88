/* An active-message counter through quiver's C API: rank 0 keeps a counter; every other
 * rank sends it COUNT active messages for handler ADD, each carrying a number to add in
 * its payload and the message's sequence number in its header. Rank 0's handler adds the
 * number and answers each message with an active message for the sender's handler TOTAL
 * (the header echoed, the running total as payload), from inside the handler
 * (quiver_am_reply_am). Nobody posts a receive: rank 0 serves by calling quiver_progress
 * until every client's messages were counted; a client sends with up to WINDOW answers
 * outstanding and runs its handler in quiver_progress too. Each side checks what it saw.
 *
 *   cc -O2 am_counter.c $(pkg-config --cflags --libs quiver) -o am_counter
 *   quiver run -n 2 -- ./am_counter [COUNT]           (default 10000)
 *
 * Active messages travel over shm and tcp (not udp yet): QUIVER_TRANSPORTS=shm,tcp.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <quiver.h>

enum { ADD = 1, TOTAL = 2, WINDOW = 16 };

static void check(quiver_status status, const char *what) {
    if (status != QUIVER_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, quiver_strerror(status),
                quiver_last_error_message());
        exit(1);
    }
}

/* Rank 0's state, the ADD handler's user data. */
struct counter {
    uint64_t total;
    uint64_t messages;
};

static int add(void *user_data, const quiver_am_message *m) {
    struct counter *c = user_data;
    uint64_t n;
    if (m->id != ADD || m->payload_len != sizeof n || m->header_len != sizeof(uint64_t)) {
        fprintf(stderr, "server: a malformed ADD (%zu + %zu bytes)\n", m->header_len,
                m->payload_len);
        return QUIVER_ERR_INVALID_ARGUMENT;
    }
    memcpy(&n, m->payload, sizeof n); /* the payload may be unaligned: copy it out */
    c->total += n;
    c->messages++;
    /* The answer, from inside the handler: never waits. */
    return quiver_am_reply_am(m, TOTAL, m->header, m->header_len, &c->total, sizeof c->total);
}

/* A client's state, the TOTAL handler's user data. */
struct client {
    uint64_t answered; /* answers seen, in the order sent */
    uint64_t last_total;
    int wrong;
};

static int total(void *user_data, const quiver_am_message *m) {
    struct client *c = user_data;
    uint64_t seq, sum;
    if (m->header_len != sizeof seq || m->payload_len != sizeof sum) {
        c->wrong = 1;
        return QUIVER_OK;
    }
    memcpy(&seq, m->header, sizeof seq);
    memcpy(&sum, m->payload, sizeof sum);
    /* One sender's messages run their handlers in the order sent. */
    if (seq != c->answered || sum <= c->last_total) {
        c->wrong = 1;
    }
    c->answered++;
    c->last_total = sum;
    return QUIVER_OK;
}

static int serve(quiver_endpoint ep, uint32_t clients, uint64_t count) {
    struct counter c = {0, 0};
    check(quiver_register_handler(ep, ADD, add, &c), "quiver_register_handler");
    while (c.messages < clients * count) {
        check(quiver_progress(ep), "quiver_progress"); /* runs the handler */
    }
    /* Client r adds r, 2r, ..., count*r: in all sum(r) * count * (count + 1) / 2. */
    uint64_t ranks_sum = (uint64_t)clients * (clients + 1) / 2;
    uint64_t expected = ranks_sum * count * (count + 1) / 2;
    quiver_am_stats stats;
    check(quiver_endpoint_am_stats(ep, &stats), "quiver_endpoint_am_stats");
    printf("server: %" PRIu64 " active messages, total %" PRIu64 ", %" PRIu64
           " handled, %" PRIu64 " replies queued\n",
           c.messages, c.total, stats.handled, stats.replies_queued);
    if (c.total != expected || stats.handled != c.messages || stats.unknown_handler != 0) {
        fprintf(stderr, "server: total %" PRIu64 ", expected %" PRIu64 "\n", c.total, expected);
        return 1;
    }
    /* Stay until the clients have their answers: each says so with a plain message. */
    for (uint32_t i = 0; i < clients; i++) {
        char done;
        check(quiver_recv(ep, &done, 1, NULL, NULL), "quiver_recv (done)");
    }
    return 0;
}

static int ask(quiver_endpoint ep, uint32_t rank, uint64_t count) {
    struct client c = {0, 0, 0};
    check(quiver_register_handler(ep, TOTAL, total, &c), "quiver_register_handler");
    quiver_conn server;
    check(quiver_connect(ep, (quiver_addr){.rank = 0, .port = 0}, &server), "quiver_connect");
    for (uint64_t seq = 0; seq < count; seq++) {
        while (seq - c.answered >= WINDOW) {
            check(quiver_progress(ep), "quiver_progress"); /* runs TOTAL */
        }
        uint64_t n = (seq + 1) * rank;
        check(quiver_send_am(ep, server, ADD, &seq, sizeof seq, &n, sizeof n), "quiver_send_am");
    }
    while (c.answered < count) {
        check(quiver_progress(ep), "quiver_progress");
    }
    char done = 'd';
    check(quiver_send(ep, server, &done, 1), "quiver_send (done)");
    if (c.wrong) {
        fprintf(stderr, "client %u: an answer out of order or malformed\n", rank);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000;
    quiver_context ctx;
    check(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank, ranks;
    check(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    check(quiver_context_size(ctx, &ranks), "quiver_context_size");
    quiver_endpoint ep;
    check(quiver_endpoint_open(ctx, 0, &ep), "quiver_endpoint_open");
    int result = rank == 0 ? serve(ep, ranks - 1, count) : ask(ep, rank, count);
    check(quiver_endpoint_free(ep), "quiver_endpoint_free");
    check(quiver_context_free(ctx), "quiver_context_free");
    return result;
}
