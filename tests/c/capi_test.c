/*
 * The C API's test program: every call and every status of include/chassis.h, checked against
 * independent oracles — brute-force k-NN computed here, the file reopened read-only by a
 * second process (this program spawned again), a copy with bytes flipped, a child whose file
 * size limit makes the system refuse writes, a thread that interrupts a batch.
 *
 * Run by tests/capi.rs (`cargo test`; under valgrind when it is installed, always in CI) and,
 * in its `write` and `search` modes, by tests/test_capi.py, which checks that a file written
 * from C is searched identically from Python and the other way round.
 *
 *   capi_test DIR                                   everything, in the empty folder DIR
 *   capi_test layout                                sizes and offsets of the header's structs
 *   capi_test write PATH DATA N DIMS METRIC         N x DIMS float32 from DATA into a new index
 *   capi_test search PATH QUERIES NQ K OUT          ids (uint64) then distances (float32)
 *
 * CHASSIS_ERROR (12, a fault inside the library) cannot be caused from C on purpose: the Rust
 * unit test capi::tests::guard_turns_panics_and_errors_into_codes covers it.
 */
#define _POSIX_C_SOURCE 200809L
#include "chassis.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define DIMS 16
#define N 600
#define NQ 20
#define K 10

static const char *argv0;
static int checks;

#define FAIL(...)                                                                           \
    do {                                                                                    \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                     \
        fprintf(stderr, __VA_ARGS__);                                                       \
        fprintf(stderr, "\n");                                                              \
        exit(1);                                                                            \
    } while (0)

/* A call that must succeed. */
#define OK(call)                                                                            \
    do {                                                                                    \
        int s_ = (call);                                                                    \
        checks++;                                                                           \
        if (s_ != CHASSIS_OK)                                                               \
            FAIL("%s returned %s: %s", #call, chassis_status_name(s_), chassis_last_error()); \
    } while (0)

/* A call that must fail with `want`, leaving a message with a help: line. */
#define STATUS(want, call)                                                                  \
    do {                                                                                    \
        int s_ = (call);                                                                    \
        checks++;                                                                           \
        if (s_ != (want))                                                                   \
            FAIL("%s returned %s, not %s (%s)", #call, chassis_status_name(s_),             \
                 chassis_status_name(want), chassis_last_error());                          \
        if ((want) != CHASSIS_OK && !strstr(chassis_last_error(), "\nhelp: "))              \
            FAIL("%s: no help line in \"%s\"", #call, chassis_last_error());                \
    } while (0)

#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        checks++;                                                                           \
        if (!(cond)) FAIL("expected %s", #cond);                                            \
    } while (0)

/* ---- data and the brute-force oracle ---- */

static uint64_t rng_state;
static float uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void fill(float *v, size_t n, uint64_t seed) {
    rng_state = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) v[i] = uniform();
}

static float l2(const float *a, const float *b) {
    double s = 0;
    for (int i = 0; i < DIMS; i++) s += (double)(a[i] - b[i]) * (a[i] - b[i]);
    return (float)sqrt(s);
}

/* The exact k nearest of `q` among rows whose `alive[i]` is set (ids are row numbers). */
static void brute(const float *data, const int *alive, const float *q, uint64_t *ids, float *d) {
    for (int j = 0; j < K; j++) ids[j] = CHASSIS_NO_ID, d[j] = INFINITY;
    for (int i = 0; i < N; i++) {
        if (alive && !alive[i]) continue;
        float x = l2(data + (size_t)i * DIMS, q);
        if (x >= d[K - 1]) continue;
        int j = K - 1;
        while (j > 0 && d[j - 1] > x) d[j] = d[j - 1], ids[j] = ids[j - 1], j--;
        d[j] = x, ids[j] = (uint64_t)i;
    }
}

/* Search all queries; every distance returned must be the exact distance of its id, and
 * recall@K against the oracle at least `min_recall`. */
static void search_matches(chassis_handle h, const float *data, const int *alive,
                           const float *queries, double min_recall) {
    int hit = 0;
    for (int q = 0; q < NQ; q++) {
        uint64_t ids[K], want[K];
        float d[K], wd[K];
        size_t found = 0;
        OK(chassis_search(h, queries + q * DIMS, DIMS, K, NULL, ids, d, &found));
        brute(data, alive, queries + q * DIMS, want, wd);
        EXPECT(found == K);
        for (int j = 0; j < K; j++) {
            EXPECT(ids[j] < N && (!alive || alive[ids[j]]));
            float exact = l2(data + ids[j] * DIMS, queries + q * DIMS);
            if (fabsf(d[j] - exact) > 1e-4f * (1 + exact))
                FAIL("query %d: distance %g of id %llu is not %g", q, d[j],
                     (unsigned long long)ids[j], exact);
            if (j > 0) EXPECT(d[j] >= d[j - 1]);
            for (int w = 0; w < K; w++) hit += ids[j] == want[w];
        }
    }
    double recall = hit / (double)(NQ * K);
    if (recall < min_recall) FAIL("recall@%d %.3f < %.3f", K, recall, min_recall);
}

static int run(const char *const *args) {
    pid_t pid;
    if (posix_spawn(&pid, args[0], NULL, NULL, (char *const *)args, environ) != 0)
        FAIL("cannot spawn %s", args[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid) FAIL("waitpid");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- a second process: the reader ---- */

static int reader_main(const char *path, long count) {
    float *data = malloc(sizeof(float) * N * DIMS), queries[NQ * DIMS];
    fill(data, (size_t)N * DIMS, 1);
    fill(queries, NQ * DIMS, 2);
    chassis_handle r;
    OK(chassis_open_read_only(path, NULL, &r));
    uint64_t n;
    OK(chassis_count(r, &n));
    EXPECT(n == (uint64_t)count);
    int alive[N];
    for (int i = 0; i < N; i++) alive[i] = i < count;
    search_matches(r, data, alive, queries, 0.95);
    STATUS(CHASSIS_READ_ONLY, chassis_add(r, data, DIMS, NULL, NULL));
    STATUS(CHASSIS_READ_ONLY, chassis_flush(r));
    OK(chassis_close(r));
    free(data);
    return 0;
}

/* ---- a child whose files may not grow: the system refuses, CHASSIS_STORAGE ---- */

static int fsize_main(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/too-big.chassis", dir);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) FAIL("setrlimit");
    chassis_handle h;
    STATUS(CHASSIS_STORAGE, chassis_open(path, DIMS, NULL, &h));
    if (chassis_last_errno() != EFBIG) FAIL("errno %d, not EFBIG", chassis_last_errno());
    int os_errno = 0;
    char msg[512];
    chassis_error_message(0, msg, sizeof msg, &os_errno);
    if (os_errno != EFBIG || strcmp(msg, chassis_last_error()) != 0) FAIL("thread's error");
    return 0;
}

/* ---- a handle's last error, asked from another thread than the call's ---- */

struct failing {
    chassis_handle h;
    int status;
};

static void *fail_on_handle(void *arg) {
    struct failing *f = arg;
    float q[DIMS] = {0};
    uint64_t ids[1];
    float dists[1];
    f->status = chassis_search(f->h, q, DIMS, 0, NULL, ids, dists, NULL); /* k = 0 */
    return NULL;
}

/* ---- interrupting a batch from another thread ---- */

struct interrupter {
    chassis_handle h;
    volatile int done;
};

static void *interrupt_loop(void *arg) {
    struct interrupter *it = arg;
    struct timespec ms = {0, 2000000};
    while (!it->done) {
        chassis_interrupt(it->h);
        nanosleep(&ms, NULL);
    }
    return NULL;
}

/* ---- searches on several threads while the writer adds ---- */

struct searcher {
    chassis_handle h;
    const float *queries;
    int failures;
};

static void *search_loop(void *arg) {
    struct searcher *s = arg;
    for (int round = 0; round < 20; round++)
        for (int q = 0; q < NQ; q++) {
            uint64_t ids[K];
            size_t found;
            if (chassis_search(s->h, s->queries + q * DIMS, DIMS, K, NULL, ids, NULL, &found) !=
                    CHASSIS_OK ||
                found != K)
                s->failures++;
        }
    return NULL;
}

static void flip(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    if (!f) FAIL("open %s", path);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static int everything(const char *dir) {
    char path[4096], copy[4096], other[4096], text[4096];
    snprintf(path, sizeof path, "%s/index.chassis", dir);
    float *data = malloc(sizeof(float) * N * DIMS), queries[NQ * DIMS];
    fill(data, (size_t)N * DIMS, 1);
    fill(queries, NQ * DIMS, 2);

    /* The library */
    EXPECT(chassis_abi_version() == CHASSIS_ABI_VERSION);
    EXPECT(strcmp(chassis_version(), CHASSIS_VERSION) == 0);
    EXPECT(chassis_libversion_number() == CHASSIS_VERSION_NUMBER);
    EXPECT(CHASSIS_VERSION_NUMBER >= 1000); /* 0.1.0 or later */
    {
        /* The error of a call on a handle, read from another thread (as Go may). */
        chassis_handle m;
        OK(chassis_open_memory(DIMS, NULL, &m));
        chassis_handle none;
        STATUS(CHASSIS_INDEX_NOT_FOUND, chassis_open_read_only("/nonexistent/x", NULL, &none));
        char mine[512];
        snprintf(mine, sizeof mine, "%s", chassis_last_error());
        struct failing f = {m, 0};
        pthread_t t;
        pthread_create(&t, NULL, fail_on_handle, &f);
        pthread_join(t, NULL);
        EXPECT(f.status == CHASSIS_INVALID_ARGUMENT);
        char msg[512];
        int os_errno = -1;
        size_t n = chassis_error_message(m, NULL, 0, NULL);
        EXPECT(n > 0 && chassis_error_message(m, msg, sizeof msg, &os_errno) == n);
        EXPECT(strstr(msg, "k=0 is out of range") != NULL && strstr(msg, "\nhelp: ") != NULL && os_errno == 0);
        EXPECT(strcmp(chassis_last_error(), mine) == 0); /* this thread's is its own */
        char small[8];
        EXPECT(chassis_error_message(m, small, sizeof small, NULL) == n && strlen(small) == 7);
        OK(chassis_close(m));
        EXPECT(chassis_error_message(m, msg, sizeof msg, NULL) == 0); /* gone with it */
        /* A reserved field set: a field of a later header, refused rather than ignored. */
        chassis_options later;
        OK(chassis_options_init(&later, sizeof later));
        later.reserved = 1;
        STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open_memory(DIMS, &later, &m));
    }
    EXPECT(strcmp(chassis_status_name(CHASSIS_ID_NOT_FOUND), "CHASSIS_ID_NOT_FOUND") == 0);
    EXPECT(strcmp(chassis_status_name(99), "CHASSIS_UNKNOWN") == 0);
    chassis_cpu_info cpu = {sizeof cpu, {0}, {0}, 0, 0, {0}, 0, 0};
    OK(chassis_get_cpu_info(&cpu));
    EXPECT(strlen(cpu.arch) > 0 && strlen(cpu.policy) > 0 && cpu.prefetch_lines > 0);
    chassis_options o;
    memset(&o, 0xff, sizeof o);
    OK(chassis_options_init(&o, sizeof o));
    EXPECT(o.size == sizeof o && o.metric == CHASSIS_METRIC_EUCLIDEAN);
    EXPECT(o.max_connections == 16 && o.ef_construction == 200 && o.ef_search == 50);
    EXPECT(o.huge_pages == CHASSIS_HUGE_PAGES_AUTO && o.warm == 0);
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_options_init(NULL, sizeof o));
    {
        /* A size too small for the size field: refused before a byte is written. */
        uint64_t four[2] = {0xabababababababab, 0xabababababababab};
        STATUS(CHASSIS_INVALID_ARGUMENT, chassis_options_init((chassis_options *)(void *)four, 4));
        STATUS(CHASSIS_INVALID_ARGUMENT,
               chassis_search_params_init((chassis_search_params *)(void *)four, 4));
        EXPECT(four[0] == 0xabababababababab && four[1] == 0xabababababababab);
    }
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_get_cpu_info(NULL));

    /* Create, add a batch, flush */
    chassis_handle h = 0;
    OK(chassis_open(path, DIMS, &o, &h));
    EXPECT(h != 0);
    size_t dims;
    OK(chassis_dims(h, &dims));
    EXPECT(dims == DIMS);
    uint64_t out_ids[N];
    OK(chassis_add_batch(h, data, N - 100, DIMS, NULL, out_ids, 0));
    for (int i = 0; i < N - 100; i++) EXPECT(out_ids[i] == (uint64_t)i);
    OK(chassis_set_user_version(h, 7));
    OK(chassis_flush(h));

    /* A reader in another process sees the flush while this writer stays open */
    char count[16];
    snprintf(count, sizeof count, "%d", N - 100);
    const char *reader[] = {argv0, "reader", path, count, NULL};
    EXPECT(run(reader) == 0);

    /* Searches on four threads while the writer adds the rest one by one */
    pthread_t threads[4];
    struct searcher s[4];
    for (int t = 0; t < 4; t++) {
        s[t].h = h, s[t].queries = queries, s[t].failures = 0;
        pthread_create(&threads[t], NULL, search_loop, &s[t]);
    }
    for (int i = N - 100; i < N; i++) {
        uint64_t got;
        OK(chassis_add(h, data + (size_t)i * DIMS, DIMS, NULL, &got));
        EXPECT(got == (uint64_t)i);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        EXPECT(s[t].failures == 0);
    }
    uint64_t n;
    OK(chassis_count(h, &n));
    EXPECT(n == N);

    /* Search: the oracle, a batch equal to one by one, filters */
    search_matches(h, data, NULL, queries, 0.95);
    uint64_t bids[NQ * K], one[K];
    float bd[NQ * K], od[K];
    chassis_search_params p;
    OK(chassis_search_params_init(&p, sizeof p));
    p.ef = 64;
    p.threads = 2;
    OK(chassis_search_batch(h, queries, NQ, DIMS, K, &p, bids, bd));
    for (int q = 0; q < NQ; q++) {
        OK(chassis_search(h, queries + q * DIMS, DIMS, K, &p, one, od, NULL));
        EXPECT(memcmp(one, bids + q * K, sizeof one) == 0);
        EXPECT(memcmp(od, bd + q * K, sizeof od) == 0);
    }
    uint64_t allowed[] = {3, 30, 300, 333, 590};
    int allow[N] = {0};
    for (int i = 0; i < 5; i++) allow[allowed[i]] = 1;
    p.allowed = allowed, p.allowed_len = 5;
    size_t found;
    OK(chassis_search(h, queries, DIMS, K, &p, one, od, &found));
    EXPECT(found == 5 && one[5] == CHASSIS_NO_ID && isinf(od[9]));
    uint64_t want[K];
    float wd[K];
    brute(data, allow, queries, want, wd);
    EXPECT(memcmp(one, want, 5 * sizeof(uint64_t)) == 0);
    p.allowed = NULL, p.allowed_len = 0;
    OK(chassis_search(h, queries, DIMS, K, NULL, want, wd, NULL));
    p.excluded = want, p.excluded_len = 3;
    OK(chassis_search(h, queries, DIMS, K, &p, one, od, NULL));
    for (int j = 0; j < K; j++) EXPECT(one[j] != want[0] && one[j] != want[1] && one[j] != want[2]);
    p.allowed_len = 2; /* NULL with a length */
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_search(h, queries, DIMS, K, &p, one, od, NULL));
    p.allowed_len = 0, p.excluded = NULL, p.excluded_len = 0;

    /* Bad input: typed statuses, nothing stored lost */
    float nan_v[DIMS];
    memcpy(nan_v, data, sizeof nan_v);
    nan_v[3] = NAN;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_add(h, nan_v, DIMS, NULL, NULL));
    STATUS(CHASSIS_DIMENSION_MISMATCH, chassis_add(h, data, DIMS - 1, NULL, NULL));
    STATUS(CHASSIS_DIMENSION_MISMATCH, chassis_search(h, queries, DIMS + 1, K, NULL, one, od, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_add(h, NULL, DIMS, NULL, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_add_batch(h, NULL, 2, DIMS, NULL, NULL, 0));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_search(h, queries, DIMS, 0, NULL, one, od, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_search(h, queries, DIMS, K, NULL, NULL, od, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_search(h, NULL, DIMS, K, NULL, one, od, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT,
           chassis_search((chassis_handle)1 << 40, queries, DIMS, K, NULL, one, od, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_count(0, &n));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_count(h, NULL));
    STATUS(CHASSIS_INVALID_ARGUMENT,
           chassis_search(h, (const float *)((const char *)queries + 1), DIMS, K, NULL, one, od, NULL));
    chassis_search_params bad = p;
    bad.size = 3;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_search(h, queries, DIMS, K, &bad, one, od, NULL));
    chassis_options bad_o = o;
    bad_o.metric = 9;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open_memory(DIMS, &bad_o, &h));
    bad_o = o;
    bad_o.max_connections = 1;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open_memory(DIMS, &bad_o, &h));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open(NULL, DIMS, NULL, &h));
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open(path, DIMS, NULL, NULL));
    uint64_t dup[2] = {5000, 5000};
    STATUS(CHASSIS_ID_IN_USE, chassis_add_batch(h, data, 2, DIMS, dup, NULL, 0));
    uint64_t id5 = 5;
    STATUS(CHASSIS_ID_IN_USE, chassis_add(h, data, DIMS, &id5, NULL));
    OK(chassis_count(h, &n));
    EXPECT(n == N);

    /* Reading */
    float v[DIMS];
    OK(chassis_get(h, 123, v, DIMS));
    EXPECT(memcmp(v, data + 123 * DIMS, sizeof v) == 0);
    STATUS(CHASSIS_ID_NOT_FOUND, chassis_get(h, 99999, v, DIMS));
    STATUS(CHASSIS_DIMENSION_MISMATCH, chassis_get(h, 123, v, DIMS - 1));
    int has;
    OK(chassis_contains(h, 123, &has));
    EXPECT(has == 1);
    OK(chassis_contains(h, 99999, &has));
    EXPECT(has == 0);
    OK(chassis_contains(h, CHASSIS_NO_ID, &has));
    EXPECT(has == 0);
    uint64_t all[N + 1], total = 0;
    OK(chassis_ids(h, NULL, 0, &total));
    EXPECT(total == N);
    OK(chassis_ids(h, all, N + 1, &total));
    for (int i = 0; i < N; i++) EXPECT(all[i] == (uint64_t)i);

    /* Commits: rollback forgets, flush keeps */
    uint64_t uv;
    OK(chassis_user_version(h, &uv));
    EXPECT(uv == 7);
    OK(chassis_set_user_version(h, 8));
    OK(chassis_delete(h, 10));
    OK(chassis_rollback(h));
    OK(chassis_user_version(h, &uv));
    EXPECT(uv == 7);
    OK(chassis_count(h, &n));
    EXPECT(n == N - 100); /* the single adds were not flushed */
    for (int i = N - 100; i < N; i++) OK(chassis_add(h, data + (size_t)i * DIMS, DIMS, NULL, NULL));
    int alive[N];
    for (int i = 0; i < N; i++) alive[i] = !(i % 7 == 0);
    for (int i = 0; i < N; i += 7) OK(chassis_delete(h, (uint64_t)i));
    STATUS(CHASSIS_ID_NOT_FOUND, chassis_delete(h, 7));
    /* A batch delete counts the ids that were there (7 is gone already, 3 twice) */
    uint64_t batch[] = {3, 3, 7, 5};
    uint64_t deleted = 0;
    OK(chassis_delete_batch(h, batch, 4, &deleted));
    EXPECT(deleted == 2);
    alive[3] = alive[5] = 0;
    /* An upsert writes id 12's vector again (replaced) and brings ids 3 and 5 back (added) */
    uint64_t up[] = {12, 3, 5};
    float rows2[3 * DIMS];
    for (int j = 0; j < 3; j++)
        memcpy(rows2 + j * DIMS, data + (size_t)up[j] * DIMS, sizeof(float) * DIMS);
    uint64_t replaced = 99;
    OK(chassis_upsert(h, rows2, 3, DIMS, up, &replaced, 0));
    EXPECT(replaced == 1);
    alive[3] = alive[5] = 1;
    OK(chassis_flush(h));
    search_matches(h, data, alive, queries, 0.95);

    /* A second writer on the same file is refused; a reader here is allowed */
    chassis_handle h2;
    STATUS(CHASSIS_INDEX_LOCKED, chassis_open(path, DIMS, NULL, &h2));
    OK(chassis_open_read_only(path, NULL, &h2));
    STATUS(CHASSIS_READ_ONLY, chassis_delete(h2, 1));
    OK(chassis_close(h2));


    /* Whole-index operations */
    chassis_check_report rep = {sizeof rep, 0, 0, 1, 1, 1, 1};
    OK(chassis_check(h, &rep));
    EXPECT(rep.ok == 1 && rep.unreachable == 0 && rep.not_finite == 0 && rep.corrupt == 0);
    snprintf(copy, sizeof copy, "%s/copy.chassis", dir);
    OK(chassis_backup(h, copy, 0));
    STATUS(CHASSIS_INVALID_PATH, chassis_backup(h, dir, 0));
    OK(chassis_open_read_only(copy, NULL, &h2));
    OK(chassis_count(h2, &n));
    EXPECT(n == N - (N + 6) / 7);
    search_matches(h2, data, alive, queries, 0.95);
    OK(chassis_close(h2));
    /* Options fixed at creation: a writer asking for others is refused; a reader takes the
     * file's */
    chassis_options cos = o;
    cos.metric = CHASSIS_METRIC_COSINE;
    STATUS(CHASSIS_OPTIONS_MISMATCH, chassis_open(copy, 0, &cos, &h2));
    OK(chassis_open_read_only(copy, &cos, &h2));
    search_matches(h2, data, alive, queries, 0.95);
    OK(chassis_close(h2));
    /* The upsert consolidated the deletes before it; its own delete (id 12) waits */
    uint64_t relinked = 0;
    OK(chassis_consolidate(h, 2, &relinked));
    EXPECT(relinked > 0);
    OK(chassis_consolidate(h, 2, &relinked));
    EXPECT(relinked == 0);
    search_matches(h, data, alive, queries, 0.95);
    OK(chassis_compact(h, 2));
    OK(chassis_count(h, &n));
    EXPECT(n == N - (N + 6) / 7);
    OK(chassis_contains(h, 14, &has));
    EXPECT(has == 0);
    search_matches(h, data, alive, queries, 0.95);

    /* Memory: ADR-0016 and ADR-0019 */
    OK(chassis_use_huge_pages(h));
    OK(chassis_keep_small_pages(h));
    OK(chassis_warm(h, 1));
    OK(chassis_wait_warm(h));
    OK(chassis_stop_warm(h));
    chassis_memory_stats m;
    memset(&m, 0, sizeof m);
    m.size = sizeof m;
    OK(chassis_get_memory_stats(h, &m));
    EXPECT(m.written_bytes > 0 && m.mapped_bytes >= m.written_bytes);
    EXPECT(m.vector_bytes >= (uint64_t)(N - (N + 6) / 7) * DIMS * 4);
    EXPECT(m.in_memory == 0 && strlen(m.populate) > 0);

    /* Close: the handle is gone */
    OK(chassis_close(h));
    STATUS(CHASSIS_INDEX_CLOSED, chassis_count(h, &n));
    STATUS(CHASSIS_INDEX_CLOSED, chassis_search(h, queries, DIMS, K, NULL, one, od, NULL));
    STATUS(CHASSIS_INDEX_CLOSED, chassis_close(h));

    /* Files that are not indexes, or are damaged */
    snprintf(other, sizeof other, "%s/missing.chassis", dir);
    STATUS(CHASSIS_INDEX_NOT_FOUND, chassis_open_read_only(other, NULL, &h2));
    STATUS(CHASSIS_INDEX_NOT_FOUND, chassis_open(other, 0, NULL, &h2));
    STATUS(CHASSIS_INVALID_PATH, chassis_open(dir, DIMS, NULL, &h2));
    snprintf(text, sizeof text, "%s/text.chassis", dir);
    FILE *f = fopen(text, "wb");
    for (int i = 0; i < 20000; i++) fputs("not an index ", f);
    fclose(f);
    STATUS(CHASSIS_NOT_AN_INDEX, chassis_open_read_only(text, NULL, &h2));
    flip(copy, 16);         /* seq of header copy 0 */
    flip(copy, 65536 + 16); /* and of copy 1 */
    STATUS(CHASSIS_CORRUPT_INDEX, chassis_open_read_only(copy, NULL, &h2));
    STATUS(CHASSIS_CORRUPT_INDEX, chassis_open(copy, 0, NULL, &h2));

    /* The system refuses a write (file size limit): CHASSIS_STORAGE, in a child */
    const char *fsize[] = {argv0, "fsize", dir, NULL};
    EXPECT(run(fsize) == 0);

    /* Ids exhausted */
    chassis_handle mem;
    OK(chassis_open_memory(DIMS, NULL, &mem));
    uint64_t last = CHASSIS_NO_ID - 1;
    OK(chassis_add(mem, data, DIMS, &last, NULL));
    STATUS(CHASSIS_INDEX_FULL, chassis_add(mem, data, DIMS, NULL, NULL));
    uint64_t reserved = CHASSIS_NO_ID;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_add(mem, data, DIMS, &reserved, NULL));
    OK(chassis_close(mem));

    /* Interrupted: a batch stopped from another thread leaves nothing */
    OK(chassis_open_memory(DIMS, NULL, &mem));
    size_t big = 20000;
    float *many = malloc(sizeof(float) * big * DIMS);
    fill(many, big * DIMS, 3);
    struct interrupter it = {mem, 0};
    pthread_t t;
    pthread_create(&t, NULL, interrupt_loop, &it);
    STATUS(CHASSIS_INTERRUPTED, chassis_add_batch(mem, many, big, DIMS, NULL, NULL, 2));
    it.done = 1;
    pthread_join(t, NULL);
    OK(chassis_count(mem, &n));
    EXPECT(n == 0);
    OK(chassis_add_batch(mem, many, 100, DIMS, NULL, NULL, 1)); /* later calls run */
    OK(chassis_count(mem, &n));
    EXPECT(n == 100);
    OK(chassis_close(mem));
    free(many);

    /* 8-bit codes in memory: walked on codes, reranked, exact distances; written to a file */
    chassis_options q8 = o;
    q8.quantization = CHASSIS_QUANTIZATION_INT8;
    OK(chassis_open_memory(DIMS, &q8, &mem));
    OK(chassis_train(mem, data, N, DIMS, 0));
    OK(chassis_add_batch(mem, data, N, DIMS, NULL, NULL, 0));
    search_matches(mem, data, NULL, queries, 0.9);
    OK(chassis_get_memory_stats(mem, &m));
    EXPECT(m.in_memory == 1 && m.code_bytes >= (uint64_t)N * DIMS);
    /* A file that is not an index is replaced only when asked to */
    STATUS(CHASSIS_NOT_AN_INDEX, chassis_backup(mem, text, 0));
    OK(chassis_backup(mem, text, 1));
    OK(chassis_close(mem));
    OK(chassis_open_read_only(text, NULL, &h2));
    search_matches(h2, data, NULL, queries, 0.9);
    STATUS(CHASSIS_OPTIONS_MISMATCH, chassis_open(text, 0, &o, &mem));
    OK(chassis_close(h2));

    /* 4-bit codes: half the codes' bytes, the same exact distances; refused with codes only */
    chassis_options q4 = o;
    q4.quantization = CHASSIS_QUANTIZATION_INT4;
    OK(chassis_open_memory(DIMS, &q4, &mem));
    OK(chassis_train(mem, data, N, DIMS, 0));
    OK(chassis_add_batch(mem, data, N, DIMS, NULL, NULL, 0));
    search_matches(mem, data, NULL, queries, 0.9);
    OK(chassis_get_memory_stats(mem, &m));
    EXPECT(m.code_bytes >= (uint64_t)N * 64); /* one 16-byte block of 4-bit codes, in a 64-byte row */
    OK(chassis_close(mem));
    q4.precision = CHASSIS_PRECISION_INT8;
    STATUS(CHASSIS_INVALID_ARGUMENT, chassis_open_memory(DIMS, &q4, &mem));

    free(data);
    printf("capi_test: %d checks passed\n", checks);
    return 0;
}

/* ---- the structs as this compiler lays them out (tests/capi.rs compares with Rust's) ---- */

#define FIELD(s, f) printf(#s "." #f " %zu\n", offsetof(s, f))
static int layout(void) {
    printf("chassis_options %zu\n", sizeof(chassis_options));
    FIELD(chassis_options, metric);
    FIELD(chassis_options, precision);
    FIELD(chassis_options, quantization);
    FIELD(chassis_options, max_connections);
    FIELD(chassis_options, ef_construction);
    FIELD(chassis_options, ef_search);
    FIELD(chassis_options, huge_pages);
    FIELD(chassis_options, warm);
    FIELD(chassis_options, placement);
    FIELD(chassis_options, reserved);
    printf("chassis_search_params %zu\n", sizeof(chassis_search_params));
    FIELD(chassis_search_params, ef);
    FIELD(chassis_search_params, rerank);
    FIELD(chassis_search_params, threads);
    FIELD(chassis_search_params, allowed);
    FIELD(chassis_search_params, allowed_len);
    FIELD(chassis_search_params, excluded);
    FIELD(chassis_search_params, excluded_len);
    printf("chassis_check_report %zu\n", sizeof(chassis_check_report));
    FIELD(chassis_check_report, ok);
    FIELD(chassis_check_report, reserved);
    FIELD(chassis_check_report, unreachable);
    FIELD(chassis_check_report, not_finite);
    FIELD(chassis_check_report, corrupt);
    FIELD(chassis_check_report, clipped);
    printf("chassis_memory_stats %zu\n", sizeof(chassis_memory_stats));
    FIELD(chassis_memory_stats, mapped_bytes);
    FIELD(chassis_memory_stats, huge_bytes);
    FIELD(chassis_memory_stats, warm_total_bytes);
    FIELD(chassis_memory_stats, huge_pages_asked);
    FIELD(chassis_memory_stats, in_memory);
    FIELD(chassis_memory_stats, populate);
    FIELD(chassis_memory_stats, reserved);
    printf("chassis_cpu_info %zu\n", sizeof(chassis_cpu_info));
    FIELD(chassis_cpu_info, arch);
    FIELD(chassis_cpu_info, vendor);
    FIELD(chassis_cpu_info, family);
    FIELD(chassis_cpu_info, model);
    FIELD(chassis_cpu_info, policy);
    FIELD(chassis_cpu_info, prefetch_lines);
    FIELD(chassis_cpu_info, prefetch_l1);
    return 0;
}

/* ---- the modes tests/test_capi.py drives ---- */

static void *slurp(const char *path, size_t bytes) {
    void *buf = malloc(bytes ? bytes : 1);
    FILE *f = fopen(path, "rb");
    if (!f || fread(buf, 1, bytes, f) != bytes) FAIL("cannot read %zu bytes from %s", bytes, path);
    fclose(f);
    return buf;
}

static int write_main(const char *path, const char *data_path, size_t n, size_t dims,
                      uint32_t metric) {
    float *data = slurp(data_path, n * dims * sizeof(float));
    chassis_options o;
    OK(chassis_options_init(&o, sizeof o));
    o.metric = metric;
    chassis_handle h;
    OK(chassis_open(path, dims, &o, &h));
    OK(chassis_add_batch(h, data, n, dims, NULL, NULL, 0));
    OK(chassis_flush(h));
    OK(chassis_close(h));
    free(data);
    return 0;
}

static int search_main(const char *path, const char *q_path, size_t nq, size_t k,
                       const char *out_path) {
    chassis_handle h;
    OK(chassis_open_read_only(path, NULL, &h));
    size_t dims;
    OK(chassis_dims(h, &dims));
    float *qs = slurp(q_path, nq * dims * sizeof(float));
    uint64_t *ids = malloc(nq * k * sizeof(uint64_t));
    float *d = malloc(nq * k * sizeof(float));
    OK(chassis_search_batch(h, qs, nq, dims, k, NULL, ids, d));
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(ids, sizeof(uint64_t), nq * k, f) != nq * k ||
        fwrite(d, sizeof(float), nq * k, f) != nq * k)
        FAIL("cannot write %s", out_path);
    fclose(f);
    OK(chassis_close(h));
    free(qs), free(ids), free(d);
    return 0;
}

int main(int argc, char **argv) {
    argv0 = argv[0];
    if (argc == 2 && strcmp(argv[1], "layout") == 0) return layout();
    if (argc == 2) return everything(argv[1]);
    if (argc == 4 && strcmp(argv[1], "reader") == 0) return reader_main(argv[2], atol(argv[3]));
    if (argc == 3 && strcmp(argv[1], "fsize") == 0) return fsize_main(argv[2]);
    if (argc == 7 && strcmp(argv[1], "write") == 0)
        return write_main(argv[2], argv[3], strtoul(argv[4], NULL, 10),
                          strtoul(argv[5], NULL, 10), (uint32_t)strtoul(argv[6], NULL, 10));
    if (argc == 7 && strcmp(argv[1], "search") == 0)
        return search_main(argv[2], argv[3], strtoul(argv[4], NULL, 10),
                           strtoul(argv[5], NULL, 10), argv[6]);
    fprintf(stderr, "usage: capi_test DIR | layout | write ... | search ...\n");
    return 2;
}
