/* Posted sends and receives on the caller's memory, byte-verified, as a 2-rank job
 * (scripts/check-c runs it over shm and tcp, and under valgrind over tcp):
 *
 *   quiver run -n 2 -- posted
 *
 * 1. three receives posted into parts of one array (40 B, 80,000 B, 1,200,004 B), three
 *    tagged sends posted from slices of another; the receives waited for in reverse
 *    order: each holds the message of its place in the posting order, every byte
 *    checked, and nothing outside the parts written;
 * 2. quiver_test before and after the message; quiver_wait past the endpoint's timeout
 *    (QUIVER_ERR_TIMEOUT, the request still valid), then waited again;
 * 3. quiver_cancel of a receive whose message has not come (withdrawn, its memory
 *    untouched, the message taken by a later receive) and of one whose message arrived
 *    (completed into its memory);
 * 4. a posted matching receive (by tag, a message of another tag arriving first), and
 *    quiver_endpoint_arm_matching past the message of the other tag;
 * 5. a receive too small (QUIVER_ERR_BUFFER_TOO_SMALL, the message kept), dead, zero and
 *    another endpoint's requests (QUIVER_ERR_BAD_HANDLE), NULLs;
 * 6. the endpoint freed with a receive still posted into heap memory, which is freed
 *    after it (valgrind would see a write after the free).
 *
 * Rank 1 paces the steps over a second endpoint (port 1) so that the posted receives of
 * endpoint 0 see only the messages meant for them. Exits 0 when every check passed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <quiver.h>

static int failures = 0;

#define EXPECT(call, code)                                                               \
    do {                                                                                 \
        quiver_status got_ = (call);                                                     \
        if (got_ != (code)) {                                                            \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %s; message: %s\n",     \
                    __FILE__, __LINE__, #call, (int)got_, quiver_strerror(got_), #code,  \
                    quiver_last_error_message());                                        \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

#define OK(call) EXPECT(call, QUIVER_OK)

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

#define PARTS 3
/* Byte offsets and lengths of the parts: in the senders' array, and in the receivers'. */
static const size_t from_at[PARTS] = {12, 4000, 200000};
static const size_t into_at[PARTS] = {28, 1000, 100003};
static const size_t part_len[PARTS] = {40, 80000, 1200004};
#define ARRAY_BYTES 1500000

static unsigned char value(uint32_t rank, size_t i) {
    return (unsigned char)((i * 2654435761u) >> 13 ^ (rank + 1) * 0x9d);
}

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            return false;
        }
    }
    return true;
}

/* Control messages between the ranks, on endpoint 1. */
struct control {
    quiver_endpoint ep;
    quiver_conn conn;
};

static void tell(struct control *c, const char *what) {
    OK(quiver_send(c->ep, c->conn, what, strlen(what)));
}

static void hear(struct control *c, const char *what) {
    char buf[32];
    size_t len = 0;
    OK(quiver_recv(c->ep, buf, sizeof buf, &len, NULL));
    if (len != strlen(what) || memcmp(buf, what, len) != 0) {
        fprintf(stderr, "control: expected \"%s\", got \"%.*s\"\n", what, (int)len, buf);
        failures++;
    }
}

/* 1: three receives, three sends, completed in reverse order. */
static void parts(quiver_endpoint ep, quiver_conn conn, uint32_t rank, quiver_addr peer) {
    unsigned char *mine = malloc(ARRAY_BYTES);
    unsigned char *landing = calloc(ARRAY_BYTES, 1);
    quiver_request recvs[PARTS], sends[PARTS];
    quiver_envelope env;
    for (size_t i = 0; i < ARRAY_BYTES; i++) {
        mine[i] = value(rank, i);
    }
    for (int i = 0; i < PARTS; i++) {
        OK(quiver_post_recv_into(ep, landing + into_at[i], part_len[i], &recvs[i]));
    }
    for (int i = 0; i < PARTS; i++) {
        OK(quiver_post_send_tagged_from(ep, conn, 7 + (uint64_t)i, mine + from_at[i],
                                        part_len[i], &sends[i]));
    }
    for (int i = 0; i < PARTS; i++) {
        OK(quiver_wait(ep, sends[i], &env));
        CHECK(env.len == part_len[i] && env.tag == 7 + (uint64_t)i);
        CHECK(env.source.rank == peer.rank && env.source.port == peer.port);
    }
    for (int i = PARTS - 1; i >= 0; i--) {
        memset(&env, 0xff, sizeof env);
        OK(quiver_wait(ep, recvs[i], &env));
        CHECK(env.len == part_len[i] && env.tag == 7 + (uint64_t)i);
        CHECK(env.source.rank == peer.rank && env.source.port == peer.port);
        for (size_t b = 0; b < part_len[i]; b++) {
            if (landing[into_at[i] + b] != value(1 - rank, from_at[i] + b)) {
                fprintf(stderr, "part %d differs at byte %zu\n", i, b);
                failures++;
                break;
            }
        }
        memset(landing + into_at[i], 0, part_len[i]);
        /* Completed: the handle is dead. */
        EXPECT(quiver_wait(ep, recvs[i], NULL), QUIVER_ERR_BAD_HANDLE);
    }
    CHECK(all_zero(landing, ARRAY_BYTES));
    free(mine);
    free(landing);
}

/* Rank 0's side of steps 2 to 5 (rank 1 sends when told to). */
static void receiver(quiver_endpoint ep, quiver_endpoint other, struct control *c) {
    unsigned char part[64], small[10], big[128];
    quiver_request req, req2, dead;
    quiver_envelope env;
    quiver_addr anyone_tag = {.rank = 1, .port = 0};
    bool done = true, completed = true, ready = false;
    size_t len = 0;

    /* 2: test before and after; a wait past the timeout keeps the request. */
    memset(part, 0, sizeof part);
    OK(quiver_post_recv_into(ep, part, sizeof part, &req));
    OK(quiver_test(ep, req, &done, &env));
    CHECK(!done);
    OK(quiver_endpoint_set_timeout(ep, 50));
    EXPECT(quiver_wait(ep, req, &env), QUIVER_ERR_TIMEOUT);
    OK(quiver_endpoint_set_timeout(ep, 60000));
    CHECK(all_zero(part, sizeof part));
    tell(c, "send late");
    do {
        OK(quiver_test(ep, req, &done, &env));
    } while (!done);
    CHECK(env.len == 4 && memcmp(part, "late", 4) == 0 && env.tag == 0);
    EXPECT(quiver_test(ep, req, &done, &env), QUIVER_ERR_BAD_HANDLE);

    /* 3: cancelled before its message: withdrawn. */
    memset(part, 0, sizeof part);
    OK(quiver_post_recv_into(ep, part, sizeof part, &req));
    OK(quiver_cancel(ep, req, &completed, &env));
    CHECK(!completed);
    EXPECT(quiver_cancel(ep, req, &completed, &env), QUIVER_ERR_BAD_HANDLE);
    tell(c, "send after cancel");
    OK(quiver_recv(ep, big, sizeof big, &len, NULL));
    CHECK(len == 12 && memcmp(big, "after cancel", 12) == 0);
    CHECK(all_zero(part, sizeof part));
    /* Cancelled after its message arrived (the later receive completed, so the earlier
     * one had): completed into its memory. */
    OK(quiver_post_recv_into(ep, part, sizeof part, &req));
    OK(quiver_post_recv_into(ep, big, sizeof big, &req2));
    tell(c, "send two");
    OK(quiver_wait(ep, req2, &env));
    CHECK(env.len == 6 && memcmp(big, "second", 6) == 0);
    OK(quiver_cancel(ep, req, &completed, &env));
    CHECK(completed && env.len == 5 && memcmp(part, "first", 5) == 0);

    /* 4: a matching receive for tag 5; tag 6 arrives first and waits. */
    memset(part, 0, sizeof part);
    OK(quiver_post_recv_matching_into(ep, &anyone_tag, 5, QUIVER_TAG_EXACT, part,
                                      sizeof part, &req));
    tell(c, "send tags");
    OK(quiver_wait(ep, req, &env));
    CHECK(env.tag == 5 && env.len == 5 && memcmp(part, "five!", 5) == 0);
    OK(quiver_endpoint_arm(ep, &ready));
    CHECK(ready); /* the tag-6 message waits */
    OK(quiver_endpoint_arm_matching(ep, NULL, 9, QUIVER_TAG_EXACT, &ready));
    CHECK(!ready); /* armed: nothing for tag 9 */
    OK(quiver_endpoint_arm_matching(ep, NULL, 6, QUIVER_TAG_EXACT, &ready));
    CHECK(ready);
    OK(quiver_recv_matching(ep, NULL, 6, QUIVER_TAG_EXACT, big, sizeof big, &env));
    CHECK(env.tag == 6 && env.len == 4 && memcmp(big, "six!", 4) == 0);

    /* 5: too small: the message stays queued for a larger buffer. */
    OK(quiver_post_recv_into(ep, small, sizeof small, &req));
    tell(c, "send long");
    memset(&env, 0, sizeof env);
    EXPECT(quiver_wait(ep, req, &env), QUIVER_ERR_BUFFER_TOO_SMALL);
    CHECK(env.len == 100);
    OK(quiver_recv(ep, big, sizeof big, &len, NULL));
    CHECK(len == 100 && big[0] == 'L' && big[99] == 'L');
    /* Handles: dead, zero, made up, another endpoint's; NULLs. */
    dead = req;
    quiver_request zero = {0}, made_up = {.id = req.id + 1000};
    EXPECT(quiver_wait(ep, dead, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_test(ep, zero, &done, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_cancel(ep, made_up, NULL, NULL), QUIVER_ERR_BAD_HANDLE);
    OK(quiver_post_recv_into(ep, part, sizeof part, &req));
    EXPECT(quiver_wait(other, req, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_test(ep, req, NULL, NULL), QUIVER_ERR_INVALID_ARGUMENT);
    OK(quiver_cancel(ep, req, NULL, NULL));
    EXPECT(quiver_post_recv_into(ep, NULL, 8, &req), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_post_recv_into(ep, part, 8, NULL), QUIVER_ERR_INVALID_ARGUMENT);
    OK(quiver_post_recv_into(ep, NULL, 0, &req)); /* an empty buffer may be NULL */
    OK(quiver_cancel(ep, req, &completed, NULL));
    CHECK(!completed);
    tell(c, "done");
}

/* Rank 1's side: sends what rank 0 asks for, in order. */
static void sender(quiver_endpoint ep, quiver_conn conn, struct control *c) {
    char longer[100];
    quiver_request req;
    memset(longer, 'L', sizeof longer);
    hear(c, "send late");
    OK(quiver_send(ep, conn, "late", 4));
    hear(c, "send after cancel");
    OK(quiver_send(ep, conn, "after cancel", 12));
    hear(c, "send two");
    /* Posted sends, freed by quiver_wait; the second waited for by quiver_cancel. */
    OK(quiver_post_send_from(ep, conn, "first", 5, &req));
    OK(quiver_wait(ep, req, NULL));
    OK(quiver_post_send_from(ep, conn, "second", 6, &req));
    bool completed = false;
    OK(quiver_cancel(ep, req, &completed, NULL));
    CHECK(completed);
    hear(c, "send tags");
    OK(quiver_send_tagged(ep, conn, 6, "six!", 4));
    OK(quiver_send_tagged(ep, conn, 5, "five!", 5));
    hear(c, "send long");
    OK(quiver_send(ep, conn, longer, sizeof longer));
    hear(c, "done");
}

int main(void) {
    quiver_context ctx;
    quiver_endpoint ep, control_ep;
    quiver_conn conn;
    uint32_t rank;
    if (quiver_context_from_env(&ctx) != QUIVER_OK) {
        fprintf(stderr, "posted: %s\n", quiver_last_error_message());
        return 1;
    }
    OK(quiver_context_rank(ctx, &rank));
    quiver_addr peer = {.rank = 1 - rank, .port = 0};
    quiver_addr peer_control = {.rank = 1 - rank, .port = 1};
    OK(quiver_endpoint_open(ctx, 0, &ep));
    OK(quiver_endpoint_open(ctx, 1, &control_ep));
    OK(quiver_endpoint_set_timeout(ep, 60000));
    OK(quiver_endpoint_set_timeout(control_ep, 60000));
    OK(quiver_connect(ep, peer, &conn));
    struct control c = {.ep = control_ep};
    OK(quiver_connect(control_ep, peer_control, &c.conn));
    if (failures != 0) {
        return 1;
    }

    parts(ep, conn, rank, peer);
    if (rank == 0) {
        receiver(ep, control_ep, &c);
    } else {
        sender(ep, conn, &c);
    }

    /* 6: freed with a receive posted into heap memory, freed after the endpoint. */
    unsigned char *heap = malloc(256);
    quiver_request left;
    OK(quiver_post_recv_into(ep, heap, 256, &left));
    OK(quiver_endpoint_free(ep));
    free(heap);
    /* The endpoints meet before closing, so neither sees the other's end mid-step. */
    tell(&c, "bye");
    hear(&c, "bye");
    OK(quiver_endpoint_free(control_ep));
    OK(quiver_context_free(ctx));
    if (failures != 0) {
        fprintf(stderr, "posted: rank %u: %d checks failed\n", rank, failures);
        return 1;
    }
    printf("posted: rank %u: every check passed\n", rank);
    return 0;
}
