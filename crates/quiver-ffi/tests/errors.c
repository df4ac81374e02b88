/* The C API's error paths, each checked for its documented code (scripts/check-c runs
 * every mode):
 *
 *   errors handles                      no job: NULL, zero, made-up and freed handles,
 *                                       strerror, a context without a job
 *   quiver run -n 2 -- errors job       a buffer too small (the message kept, its length
 *                                       told), another endpoint's connection, tags (exact,
 *                                       masked, by source, probe, out of order, too small,
 *                                       NULL arguments), active messages (an unknown
 *                                       handler, a handler's failure status, the calls a
 *                                       handler may and may not make), a second thread
 *                                       in a busy endpoint, a closed connection, a dead
 *                                       peer
 *   errors wrong-key                    by hand, rank 1 of a job whose rank 0 holds
 *                                       another key (QUIVER_* set by the caller)
 *
 * Exits 0 when every check passed; prints each failed one.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static void ok(quiver_status status, const char *what) {
    if (status != QUIVER_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, quiver_strerror(status),
                quiver_last_error_message());
        exit(1);
    }
}

/* Counts the active messages it runs for (user_data: an int counter, or NULL). */
static int count_one(void *user_data, const quiver_am_message *m) {
    (void)m;
    if (user_data != NULL) {
        (*(int *)user_data)++;
    }
    return QUIVER_OK;
}

/* Fails with a status of its own choosing: the call that ran it returns it. */
static int fail_stopped(void *user_data, const quiver_am_message *m) {
    (void)user_data;
    (void)m;
    return QUIVER_ERR_PEER_STOPPED;
}

/* What a handler may and may not do, checked from inside one. */
struct inside {
    quiver_endpoint ep;
    int ran;
};

static int check_inside(void *user_data, const quiver_am_message *m) {
    struct inside *in = user_data;
    int64_t timeout;
    quiver_am_message copy = *m;
    in->ran++;
    /* The endpoint's handle is held by the call that runs the handler. */
    EXPECT(quiver_endpoint_timeout(in->ep, &timeout), QUIVER_ERR_BUSY);
    EXPECT(quiver_progress(in->ep), QUIVER_ERR_BUSY);
    /* A reply names the message the handler was given, not a copy of it. */
    EXPECT(quiver_am_reply(&copy, "x", 1), QUIVER_ERR_INVALID_ARGUMENT);
    CHECK(m->id == 6 && m->header_len == 3 && memcmp(m->header, "hdr", 3) == 0);
    CHECK(m->payload_len == 4 && memcmp(m->payload, "ping", 4) == 0);
    return quiver_am_reply(m, "pong", 4);
}

static int handles(void) {
    quiver_context zero_ctx = {0};
    quiver_endpoint zero_ep = {0};
    quiver_conn zero_conn = {0};
    quiver_endpoint made_up = {.id = 0x1234567800000007ull};
    uint32_t rank;
    char buf[8];
    size_t len;

    EXPECT(quiver_context_rank(zero_ctx, &rank), QUIVER_ERR_BAD_HANDLE);
    CHECK(strstr(quiver_last_error_message(), "not an open context handle") != NULL);
    EXPECT(quiver_context_free(zero_ctx), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_endpoint_free(zero_ep), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_endpoint_free(made_up), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_send(made_up, zero_conn, "x", 1), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_recv(zero_ep, buf, sizeof buf, &len, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_try_recv(made_up, buf, sizeof buf, NULL, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_endpoint_open(zero_ctx, 0, NULL), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_context_from_env(NULL), QUIVER_ERR_INVALID_ARGUMENT);
    CHECK(strstr(quiver_last_error_message(), "out is NULL") != NULL);
    /* A NULL buffer with a length is refused before the handle is looked at. */
    EXPECT(quiver_send(made_up, zero_conn, NULL, 5), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_recv(made_up, NULL, 5, NULL, NULL), QUIVER_ERR_INVALID_ARGUMENT);

    /* The tagged calls: bad handles and NULLs the same way. */
    quiver_envelope env;
    quiver_addr anyone = {.rank = 1, .port = 0};
    EXPECT(quiver_send_tagged(made_up, zero_conn, 7, "x", 1), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_try_send_tagged(zero_ep, zero_conn, 7, "x", 1), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_send_tagged(made_up, zero_conn, 7, NULL, 1), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_recv_matching(zero_ep, NULL, 7, QUIVER_TAG_EXACT, buf, sizeof buf, &env),
           QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_try_recv_matching(made_up, &anyone, 0, QUIVER_TAG_ANY, buf, sizeof buf, NULL),
           QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_recv_matching(made_up, NULL, 7, QUIVER_TAG_EXACT, NULL, 5, &env),
           QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_probe(made_up, NULL, 7, QUIVER_TAG_EXACT, &env), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_try_probe(zero_ep, &anyone, 7, QUIVER_TAG_EXACT, &env), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_probe(made_up, NULL, 7, QUIVER_TAG_EXACT, NULL), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_try_probe(made_up, NULL, 7, QUIVER_TAG_EXACT, NULL), QUIVER_ERR_INVALID_ARGUMENT);

    /* Active messages: bad handles, NULLs, and replies outside a handler. */
    quiver_am_message fake = {.source = {.rank = 1, .port = 0}, .id = 1};
    EXPECT(quiver_register_handler(made_up, 1, count_one, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_register_handler(made_up, 1, NULL, NULL), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_unregister_handler(zero_ep, 1, NULL), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_send_am(made_up, zero_conn, 1, NULL, 0, "x", 1), QUIVER_ERR_BAD_HANDLE);
    EXPECT(quiver_try_send_am(made_up, zero_conn, 1, NULL, 3, "x", 1),
           QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_am_reply(&fake, "x", 1), QUIVER_ERR_INVALID_ARGUMENT);
    CHECK(strstr(quiver_last_error_message(), "only inside an active-message handler") != NULL);
    EXPECT(quiver_am_reply_am(NULL, 1, NULL, 0, NULL, 0), QUIVER_ERR_INVALID_ARGUMENT);
    quiver_am_stats am_stats;
    EXPECT(quiver_endpoint_am_stats(zero_ep, &am_stats), QUIVER_ERR_BAD_HANDLE);
    CHECK(strcmp(quiver_strerror(QUIVER_ERR_IN_HANDLER),
                 "call not allowed inside an active-message handler") == 0);

    CHECK(strcmp(quiver_strerror(QUIVER_OK), "success") == 0);
    CHECK(strcmp(quiver_strerror((quiver_status)9999), "unknown quiver status") == 0);
    CHECK(strcmp(quiver_strerror((quiver_status)-1), "unknown quiver status") == 0);
    CHECK(strlen(quiver_version()) > 0);

    /* No launcher, no QUIVER_RANK: the environment describes no job. */
    quiver_context ctx;
    quiver_status s = quiver_context_from_env(&ctx);
    CHECK(s == QUIVER_ERR_CONFIG);
    if (s != QUIVER_ERR_CONFIG) {
        fprintf(stderr, "quiver_context_from_env without a job: %s: %s\n", quiver_strerror(s),
                quiver_last_error_message());
    }
    return failures;
}

/* The tagged messages rank 1 sends to rank 0 (their tags and texts). */
#define LIBRARY ((uint64_t)0xab << 56)
static const struct {
    uint64_t tag;
    const char *text;
} TAGGED[] = {
    {5, "five"}, {7, "seven"}, {LIBRARY | 1, "library one"}, {7, "seven again"},
    {LIBRARY | 2, "library two"}, {0, "plain"}, {9, "nine, a long one: thirty bytes"},
};
#define TAGGED_COUNT (sizeof TAGGED / sizeof TAGGED[0])

static void send_tagged_set(quiver_endpoint ep, quiver_conn conn) {
    for (size_t i = 0; i < TAGGED_COUNT; i++) {
        if (TAGGED[i].tag == 0) {
            EXPECT(quiver_send(ep, conn, TAGGED[i].text, strlen(TAGGED[i].text)), QUIVER_OK);
        } else {
            EXPECT(quiver_send_tagged(ep, conn, TAGGED[i].tag, TAGGED[i].text,
                                      strlen(TAGGED[i].text)),
                   QUIVER_OK);
        }
    }
}

/* Takes `want` (a tag and a mask, from `source` or anyone) and checks it got `index`. */
static void take(quiver_endpoint ep, const quiver_addr *source, uint64_t tag, uint64_t mask,
                 size_t index, int line) {
    char got[64];
    quiver_envelope env = {.len = 0};
    quiver_status s = quiver_recv_matching(ep, source, tag, mask, got, sizeof got, &env);
    size_t n = strlen(TAGGED[index].text);
    if (s != QUIVER_OK || env.tag != TAGGED[index].tag || env.len != n || env.source.rank != 1 ||
        env.source.port != 0 || memcmp(got, TAGGED[index].text, n) != 0) {
        fprintf(stderr, "%s:%d: tagged receive: %s (%s); tag %#llx, %zu bytes, expected \"%s\"\n",
                __FILE__, line, quiver_strerror(s), quiver_last_error_message(),
                (unsigned long long)env.tag, env.len, TAGGED[index].text);
        failures++;
    }
}

/* Rank 0: receives rank 1's tagged messages out of order, by tag, mask and source. */
static void receive_tagged_set(quiver_endpoint ep, quiver_endpoint other, uint32_t peer_rank) {
    quiver_addr from_peer = {.rank = peer_rank, .port = 0};
    quiver_addr from_nobody = {.rank = peer_rank, .port = 1}; /* no such sender */
    quiver_envelope env = {.len = 0};
    char small[4], got[64];

    /* Probe: the last one, sized before it is taken; waits until it is there. */
    EXPECT(quiver_probe(ep, &from_peer, 9, QUIVER_TAG_EXACT, &env), QUIVER_OK);
    CHECK(env.tag == 9 && env.len == strlen(TAGGED[6].text) && env.source.rank == peer_rank);
    /* Everything has arrived now: what matches nothing would block. */
    EXPECT(quiver_try_probe(ep, NULL, 8, QUIVER_TAG_EXACT, &env), QUIVER_ERR_WOULD_BLOCK);
    EXPECT(quiver_try_recv_matching(ep, &from_nobody, 0, QUIVER_TAG_ANY, got, sizeof got, &env),
           QUIVER_ERR_WOULD_BLOCK);
    EXPECT(quiver_try_recv_matching(other, NULL, 0, QUIVER_TAG_ANY, got, sizeof got, &env),
           QUIVER_ERR_WOULD_BLOCK); /* another endpoint's messages are not its */
    /* Too small: the message stays, its length told in env.len only. */
    env = (quiver_envelope){.source = {.rank = 77, .port = 77}, .tag = 77, .len = 0};
    EXPECT(quiver_recv_matching(ep, NULL, 9, QUIVER_TAG_EXACT, small, sizeof small, &env),
           QUIVER_ERR_BUFFER_TOO_SMALL);
    CHECK(env.len == strlen(TAGGED[6].text) && env.tag == 77 && env.source.rank == 77);
    CHECK(strstr(quiver_last_error_message(), "too small") != NULL);
    take(ep, &from_peer, 9, QUIVER_TAG_EXACT, 6, __LINE__);
    /* Exact tags, out of the order sent; one sender's equal tags in the order sent. */
    take(ep, NULL, 7, QUIVER_TAG_EXACT, 1, __LINE__);
    take(ep, &from_peer, 7, QUIVER_TAG_EXACT, 3, __LINE__);
    /* A mask: the library's messages by their high byte, in the order sent. */
    take(ep, NULL, LIBRARY, (uint64_t)0xff << 56, 2, __LINE__);
    EXPECT(quiver_try_probe(ep, NULL, LIBRARY | 0xffff, (uint64_t)0xff << 56, &env), QUIVER_OK);
    CHECK(env.tag == (LIBRARY | 2));
    take(ep, NULL, LIBRARY, (uint64_t)0xff << 56, 4, __LINE__);
    /* A plain receive takes any tag: the earliest left (tag 5), then the plain one. */
    size_t len = 0;
    EXPECT(quiver_recv(ep, got, sizeof got, &len, NULL), QUIVER_OK);
    CHECK(len == 4 && memcmp(got, "five", 4) == 0);
    take(ep, &from_peer, 0, QUIVER_TAG_ANY, 5, __LINE__);
    EXPECT(quiver_try_probe(ep, NULL, 0, QUIVER_TAG_ANY, &env), QUIVER_ERR_WOULD_BLOCK);
}

static double monotonic_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Rank 0: runs rank 1's active messages in quiver_progress, checking each outcome. */
static void serve_active_messages(quiver_endpoint ep, quiver_conn conn) {
    struct inside in = {.ep = ep, .ran = 0};
    int failing = 0;
    bool was = true;
    EXPECT(quiver_unregister_handler(ep, 5, &was), QUIVER_OK);
    CHECK(!was);
    ok(quiver_register_handler(ep, 5, count_one, &failing), "quiver_register_handler 5");
    ok(quiver_register_handler(ep, 5, fail_stopped, NULL), "replace handler 5");
    ok(quiver_register_handler(ep, 6, check_inside, &in), "quiver_register_handler 6");
    ok(quiver_send(ep, conn, "a", 1), "quiver_send a");
    quiver_status seen[3];
    int errors = 0;
    /* Rank 1 sends once it has "a"; on a busy machine that can take a while, so the
     * loop is bounded by time, not by a count of turns a fast progress runs through. */
    double deadline = monotonic_seconds() + 30;
    while (in.ran == 0 && monotonic_seconds() < deadline) {
        quiver_status s = quiver_progress(ep);
        if (s != QUIVER_OK && errors < 3) {
            seen[errors++] = s;
            if (s == QUIVER_ERR_PEER_STOPPED) {
                CHECK(strstr(quiver_last_error_message(), "handler 5") != NULL);
            }
        }
    }
    CHECK(in.ran == 1 && failing == 0);
    CHECK(errors == 2 && seen[0] == QUIVER_ERR_UNKNOWN_HANDLER &&
          seen[1] == QUIVER_ERR_PEER_STOPPED);
    quiver_am_stats stats;
    ok(quiver_endpoint_am_stats(ep, &stats), "quiver_endpoint_am_stats");
    CHECK(stats.handled == 2 && stats.unknown_handler == 1);
    EXPECT(quiver_unregister_handler(ep, 5, &was), QUIVER_OK);
    CHECK(was);
}

struct blocked {
    quiver_endpoint ep;
    quiver_status status;
    size_t len;
};

static void *receive_one(void *arg) {
    struct blocked *b = arg;
    char buf[16];
    b->status = quiver_recv(b->ep, buf, sizeof buf, &b->len, NULL);
    return NULL;
}

static int job(void) {
    quiver_context ctx;
    ok(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank;
    ok(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    quiver_endpoint ep, other;
    ok(quiver_endpoint_open(ctx, 0, &ep), "quiver_endpoint_open");
    ok(quiver_endpoint_open(ctx, 1, &other), "quiver_endpoint_open 1");
    EXPECT(quiver_endpoint_open(ctx, 0, &other), QUIVER_ERR_INVALID_ARGUMENT); /* port open */
    quiver_conn conn;
    ok(quiver_connect(ep, (quiver_addr){.rank = 1 - rank, .port = 0}, &conn), "quiver_connect");
    /* A connection is valid only with its own endpoint. */
    EXPECT(quiver_send(other, conn, "x", 1), QUIVER_ERR_BAD_HANDLE);
    quiver_conn forged = {.id = conn.id + 1};
    EXPECT(quiver_send(ep, forged, "x", 1), QUIVER_ERR_BAD_HANDLE);

    char big[100], small[10], go = 'g';
    size_t len = 0;
    quiver_addr src;
    if (rank == 1) {
        memset(big, 7, sizeof big);
        ok(quiver_send(ep, conn, big, sizeof big), "quiver_send");
        send_tagged_set(ep, conn);
        /* Active messages once rank 0 has its handlers: an unknown id, a failing
         * handler, one that checks the rules inside and answers "pong". */
        ok(quiver_recv(ep, &go, 1, &len, NULL), "quiver_recv am");
        ok(quiver_send_am(ep, conn, 99, NULL, 0, "lost", 4), "quiver_send_am 99");
        ok(quiver_send_am(ep, conn, 5, NULL, 0, NULL, 0), "quiver_send_am 5");
        ok(quiver_send_am(ep, conn, 6, "hdr", 3, "ping", 4), "quiver_send_am 6");
        char pong[8];
        EXPECT(quiver_recv(ep, pong, sizeof pong, &len, NULL), QUIVER_OK);
        CHECK(len == 4 && memcmp(pong, "pong", 4) == 0);
        /* Wait for rank 0's "go", then die without closing anything. */
        ok(quiver_recv(ep, &go, 1, &len, NULL), "quiver_recv go");
        fflush(stderr);
        _exit(failures ? 1 : 0);
    }
    EXPECT(quiver_recv(ep, small, sizeof small, &len, &src), QUIVER_ERR_BUFFER_TOO_SMALL);
    CHECK(len == sizeof big);
    CHECK(strstr(quiver_last_error_message(), "too small") != NULL);
    EXPECT(quiver_recv(ep, big, sizeof big, &len, &src), QUIVER_OK); /* the message was kept */
    CHECK(len == sizeof big && big[0] == 7 && big[99] == 7 && src.rank == 1);
    receive_tagged_set(ep, other, 1 - rank);
    serve_active_messages(ep, conn);

    /* A second thread in a busy endpoint is refused, not raced. */
    struct blocked b = {.ep = other, .status = QUIVER_OK};
    pthread_t thread;
    ok(quiver_endpoint_set_timeout(other, 2000), "quiver_endpoint_set_timeout");
    pthread_create(&thread, NULL, receive_one, &b);
    usleep(300 * 1000);
    EXPECT(quiver_try_recv(other, small, sizeof small, NULL, NULL), QUIVER_ERR_BUSY);
    pthread_join(thread, NULL);
    CHECK(b.status == QUIVER_ERR_TIMEOUT);
    int64_t timeout;
    ok(quiver_endpoint_timeout(other, &timeout), "quiver_endpoint_timeout");
    CHECK(timeout == 2000);

    /* The peer dies: the receive reports it, with a message naming it. */
    ok(quiver_send(ep, conn, &go, 1), "quiver_send go");
    quiver_status dead = quiver_recv(ep, big, sizeof big, &len, &src);
    CHECK(dead == QUIVER_ERR_PEER_DEAD);
    if (dead != QUIVER_ERR_PEER_DEAD) {
        fprintf(stderr, "receive after the peer died: %s: %s\n", quiver_strerror(dead),
                quiver_last_error_message());
    } else {
        CHECK(strstr(quiver_last_error_message(), "died") != NULL);
    }

    /* Closing: a closed connection is refused afterwards. */
    quiver_conn to_self;
    ok(quiver_connect(other, (quiver_addr){.rank = 0, .port = 0}, &to_self), "connect self");
    ok(quiver_close(other, to_self), "quiver_close");
    EXPECT(quiver_send(other, to_self, "x", 1), QUIVER_ERR_INVALID_ARGUMENT);
    EXPECT(quiver_close(other, to_self), QUIVER_ERR_INVALID_ARGUMENT);

    ok(quiver_endpoint_free(other), "quiver_endpoint_free other");
    EXPECT(quiver_endpoint_free(other), QUIVER_ERR_BAD_HANDLE); /* freed twice */
    EXPECT(quiver_try_recv(other, small, sizeof small, NULL, NULL), QUIVER_ERR_BAD_HANDLE);
    ok(quiver_endpoint_free(ep), "quiver_endpoint_free");
    ok(quiver_context_free(ctx), "quiver_context_free");
    EXPECT(quiver_context_free(ctx), QUIVER_ERR_BAD_HANDLE);
    return failures;
}

static int wrong_key(void) {
    quiver_context ctx;
    ok(quiver_context_from_env(&ctx), "quiver_context_from_env");
    uint32_t rank;
    ok(quiver_context_rank(ctx, &rank), "quiver_context_rank");
    quiver_endpoint ep;
    ok(quiver_endpoint_open(ctx, 0, &ep), "quiver_endpoint_open");
    if (rank == 0) {
        sleep(4); /* rank 1 (another key) tries to connect meanwhile */
    } else {
        quiver_conn conn;
        quiver_status s = quiver_connect(ep, (quiver_addr){.rank = 0, .port = 0}, &conn);
        CHECK(s == QUIVER_ERR_WRONG_KEY);
        if (s != QUIVER_ERR_WRONG_KEY) {
            fprintf(stderr, "connect with another key: %s: %s\n", quiver_strerror(s),
                    quiver_last_error_message());
        }
    }
    ok(quiver_endpoint_free(ep), "quiver_endpoint_free");
    ok(quiver_context_free(ctx), "quiver_context_free");
    return failures;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int result;
    if (strcmp(mode, "handles") == 0) {
        result = handles();
    } else if (strcmp(mode, "job") == 0) {
        result = job();
    } else if (strcmp(mode, "wrong-key") == 0) {
        result = wrong_key();
    } else {
        fprintf(stderr, "usage: errors handles | job | wrong-key\n");
        return 2;
    }
    if (result == 0) {
        printf("errors %s: every check passed\n", mode);
    }
    return result ? 1 : 0;
}
