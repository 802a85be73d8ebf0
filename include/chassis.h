/*
 * chassis.h: the C API of Chassis, an embedded vector index in one memory-mapped file
 * (vectors and an HNSW graph). The same core, and the same files, as the Python package.
 *
 * Install it (Linux): make install PREFIX=/usr/local   (the Makefile says what goes where:
 * libchassis.so.<ABI> by SONAME, libchassis.a, this header, pkgconfig/chassis.pc), then
 *     cc app.c $(pkg-config --cflags --libs chassis)
 *     (static: cc app.c $(pkg-config --cflags chassis) <libdir>/libchassis.a -lpthread -ldl -lm)
 * Or in the tree, with Cargo (feature "capi", on by default):
 *     cargo build --release                                  -> target/release/libchassis.so
 *     cargo rustc --release --lib --crate-type staticlib     -> target/release/libchassis.a
 *
 * Conventions
 * - An index is a chassis_handle: a number, like a file descriptor, never reused. A call on a
 *   closed handle returns CHASSIS_INDEX_CLOSED; on a number never issued (0 is never one),
 *   CHASSIS_INVALID_ARGUMENT. Use after close is refused, never undefined.
 * - Every call but the library's first few returns a status: CHASSIS_OK (0) or one of the
 *   codes below, the same integers as the `code` of the Python exceptions. chassis_last_error()
 *   then gives the message: one line naming what was wrong, and a "help:" line saying what to
 *   do; chassis_last_errno() the OS error number; chassis_error_message() both, by handle,
 *   to any thread.
 * - Pointers: NULL where a value is required, a misaligned array, or a length no array can
 *   have is refused with CHASSIS_INVALID_ARGUMENT. A wrong `dims` is CHASSIS_DIMENSION_MISMATCH.
 *   What cannot be checked is the caller's promise: an array is valid for the length passed,
 *   and no other thread writes an input or touches an output during the call.
 * - Structs start with `size`, their size in bytes. Set it to sizeof(the struct) (the _init
 *   functions do), so that a program built against this header works with a later library
 *   whose structs have grown, and the other way round.
 * - Threads, call by call. Any call may be made from any thread, on one handle as on many,
 *   as in Python:
 *     run alongside every call: search, search_batch, get, contains, count, dims, ids,
 *       user_version, get_memory_stats, warm, wait_warm, stop_warm, use_huge_pages,
 *       keep_small_pages, interrupt (searches see the last published state while a batch
 *       links or a flush syncs);
 *     take turns with each other, searches going on meanwhile: add, add_batch, train, delete,
 *       flush, rollback, set_user_version, consolidate, compact, and backup of a writer (it
 *       flushes first);
 *     check: alongside searches; writes wait while it scans;
 *     close: calls still running on the handle complete or return CHASSIS_INDEX_CLOSED;
 *     the library calls (abi_version, version, libversion_number, last_error, last_errno,
 *       error_message, status_name, get_cpu_info, the _init functions): any thread, any time.
 *   One writer process per file (a second gets CHASSIS_INDEX_LOCKED); any number of readers,
 *   in any process.
 * - Long calls (add_batch, train, search_batch, backup, consolidate, compact, check, wait_warm)
 *   stop with CHASSIS_INTERRUPTED when chassis_interrupt is called from another thread; nothing
 *   they did remains (the file stays as last flushed).
 * - No call lets a panic out: a fault inside the library returns CHASSIS_ERROR.
 */
#ifndef CHASSIS_H
#define CHASSIS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes; chassis_abi_version() returns the library's. */
#define CHASSIS_ABI_VERSION 1
/* The version of the library this header comes with, SQLite's way: chassis_version() and
 * chassis_libversion_number() return the library's own. */
#define CHASSIS_VERSION "0.1.0"
#define CHASSIS_VERSION_NUMBER 1000 /* major x 1,000,000 + minor x 1,000 + patch */

/* Statuses (the Python exceptions' `code`). */
#define CHASSIS_OK 0
#define CHASSIS_INVALID_ARGUMENT 1   /* InvalidArgumentError: a bad value (NULL, k = 0, NaN) */
#define CHASSIS_DIMENSION_MISMATCH 2 /* DimensionMismatchError */
#define CHASSIS_OPTIONS_MISMATCH 3   /* OptionsMismatchError: created with other fixed options */
#define CHASSIS_INDEX_NOT_FOUND 4    /* IndexNotFoundError: no index at the path */
#define CHASSIS_NOT_AN_INDEX 5       /* NotAnIndexError: not a Chassis file, or a newer format */
#define CHASSIS_ID_IN_USE 6          /* IdInUseError */
#define CHASSIS_INDEX_LOCKED 7       /* IndexLockedError: another writer has the file */
#define CHASSIS_READ_ONLY 8          /* ReadOnlyError: a write on a read-only handle */
#define CHASSIS_CORRUPT_INDEX 9      /* CorruptIndexError: the file is damaged */
#define CHASSIS_INDEX_FULL 10        /* IndexFullError: the index or its ids are exhausted */
#define CHASSIS_INVALID_PATH 11      /* InvalidPathError */
#define CHASSIS_ERROR 12             /* ChassisError: a fault inside the library */
#define CHASSIS_ID_NOT_FOUND 13      /* IdNotFoundError */
#define CHASSIS_INDEX_CLOSED 14      /* IndexClosedError: the handle was closed */
#define CHASSIS_STORAGE 15           /* StorageError: the system refused (disk full, EFBIG...) */
#define CHASSIS_INTERRUPTED 16       /* KeyboardInterrupt in Python: chassis_interrupt */

/* Options */
#define CHASSIS_METRIC_EUCLIDEAN 1     /* distances: the L2 distance */
#define CHASSIS_METRIC_COSINE 2        /* 1 - cosine similarity */
#define CHASSIS_METRIC_INNER_PRODUCT 3 /* - dot product */
#define CHASSIS_PRECISION_FULL 1       /* float32 vectors */
#define CHASSIS_PRECISION_HALF 2       /* float16 vectors, float32 queries */
#define CHASSIS_PRECISION_INT8 3       /* 8-bit codes only: distances are the codes' */
#define CHASSIS_QUANTIZATION_NONE 0
#define CHASSIS_QUANTIZATION_INT8 1    /* 8-bit codes beside the vectors, reranked on them */
#define CHASSIS_QUANTIZATION_INT4 2    /* 4-bit codes beside the vectors, reranked further */
#define CHASSIS_HUGE_PAGES_AUTO (-1)   /* ADR-0016: let chassis_warm decide */
#define CHASSIS_HUGE_PAGES_ON 1
#define CHASSIS_HUGE_PAGES_OFF 2
#define CHASSIS_PLACEMENT_BALANCED 0   /* in-memory indexes: pages spread over NUMA nodes */
#define CHASSIS_PLACEMENT_LOCAL 1

/* A search's result slots past the results it found hold this id (and infinity). */
#define CHASSIS_NO_ID UINT64_MAX

typedef uint64_t chassis_handle;

/* How an index is created (fixed: metric, precision, quantization, max_connections; checked
 * against an existing file) and tuned for one handle. A zero field means its default. */
typedef struct chassis_options {
    size_t size;
    uint32_t metric;          /* CHASSIS_METRIC_*; default euclidean */
    uint32_t precision;       /* CHASSIS_PRECISION_*; default full */
    uint32_t quantization;    /* CHASSIS_QUANTIZATION_*; default none */
    uint32_t max_connections; /* M, 2 to 256; default 16 */
    uint32_t ef_construction; /* default 200 */
    uint32_t ef_search;       /* default 50 */
    int32_t huge_pages;       /* CHASSIS_HUGE_PAGES_*; default auto */
    uint32_t warm;            /* non-zero: read the index in from opening (ADR-0019) */
    uint32_t placement;       /* CHASSIS_PLACEMENT_*; default balanced */
    uint32_t reserved;        /* 0: where padding would be, so that a field a later header puts
                                 here is refused by an older library, not silently ignored */
} chassis_options;

/* What a search may be told besides the query and k. */
typedef struct chassis_search_params {
    size_t size;
    size_t ef;                /* 0: the handle's ef_search */
    size_t rerank;            /* codes (8- or 4-bit): candidates measured again on the vectors; 0: default */
    size_t threads;           /* chassis_search_batch: 0 = one per core */
    const uint64_t *allowed;  /* only these ids may be returned; NULL: any */
    size_t allowed_len;
    const uint64_t *excluded; /* never these ids; NULL with length 0: none */
    size_t excluded_len;
} chassis_search_params;

/* What chassis_check found, counted. */
typedef struct chassis_check_report {
    size_t size;
    uint32_t ok;          /* 1: nothing unreachable, non-finite or corrupt */
    uint32_t reserved;    /* 0 */
    uint64_t unreachable; /* live vectors no search can reach */
    uint64_t not_finite;  /* live vectors holding NaN or infinity */
    uint64_t corrupt;     /* slots whose bytes fail their checksums */
    uint64_t clipped;     /* codes: values clipped to the quantizer's range (not damage) */
} chassis_check_report;

/* What the system holds of an index's mappings (Python's memory_stats()). A count the system
 * does not give (huge pages off Linux) is UINT64_MAX. */
typedef struct chassis_memory_stats {
    size_t size;
    uint64_t mapped_bytes;
    uint64_t written_bytes;
    uint64_t resident_bytes;
    uint64_t vector_bytes;
    uint64_t resident_vector_bytes;
    uint64_t graph_bytes;
    uint64_t resident_graph_bytes;
    uint64_t code_bytes;
    uint64_t resident_code_bytes;
    uint64_t vector_huge_bytes;
    uint64_t graph_huge_bytes;
    uint64_t huge_bytes;
    uint64_t warm_done_bytes;
    uint64_t warm_total_bytes;
    uint32_t huge_pages_asked;
    uint32_t huge_pages_refused;
    uint32_t warm_running;
    uint32_t naming_pages;  /* 1: searches prefetch their next pages (WILLNEED advice): the
                               index was short of memory at the last sample */
    uint32_t in_memory;   /* 1: no file */
    char populate[32];    /* how warm reads in: "MADV_POPULATE_READ", "MADV_WILLNEED", "none" */
    uint32_t reserved;    /* 0 */
} chassis_memory_stats;

/* The CPU as ADR-0015 sees it, and the prefetch policy it chose. */
typedef struct chassis_cpu_info {
    size_t size;
    char arch[16];
    char vendor[16];
    uint32_t family;
    uint32_t model;
    char policy[16];         /* "zen4", "zen5", "apple", "aarch64" or "default" */
    uint32_t prefetch_lines; /* cache lines of a neighbor's vector asked for ahead */
    uint32_t prefetch_l1;    /* 1: into L1; 0: into L2 */
} chassis_cpu_info;

/* ---- the library (these return values, not statuses; any thread) ---- */
uint32_t chassis_abi_version(void);
const char *chassis_version(void);
uint32_t chassis_libversion_number(void);
/* This thread's last error message ("" before any); valid until its next failing call. */
const char *chassis_last_error(void);
/* The OS error number (errno: ENOSPC, EIO, EFBIG...) of this thread's last error; 0: none. */
int chassis_last_errno(void);
/* The last error of a call on `handle`, whatever thread asks (0: this thread's last error; a
 * runtime that moves a caller between threads, as Go's does, asks by handle). Copies the
 * message into buf (at most len bytes with the NUL; NULL with len 0 asks the length only) and
 * its OS error number into *os_errno (NULL: not wanted); returns the message's length without
 * the NUL, as snprintf does; 0 when there is none (closing a handle forgets its error). */
size_t chassis_error_message(chassis_handle handle, char *buf, size_t len, int *os_errno);
/* "CHASSIS_ID_NOT_FOUND" for 13, ...; "CHASSIS_UNKNOWN" for a number that is no status. */
const char *chassis_status_name(int status);

/* Fill a struct of `size` bytes (sizeof it) with the defaults. */
int chassis_options_init(chassis_options *options, size_t size);
int chassis_search_params_init(chassis_search_params *params, size_t size);
/* The caller sets info->size. */
int chassis_get_cpu_info(chassis_cpu_info *info);

/* ---- opening and closing ---- */
/* Open for writing; create with `dims` dimensions when missing (dims 0: the file's). options
 * NULL: the file's own (or the defaults, to create). */
int chassis_open(const char *path, size_t dims, const chassis_options *options,
                 chassis_handle *handle);
/* A reader: sees each flush of the writer (in any process). Its fixed options are the file's;
 * options (or NULL) tune only this handle (ef_search, huge_pages, warm). */
int chassis_open_read_only(const char *path, const chassis_options *options,
                           chassis_handle *handle);
/* An index in memory, with no file (chassis_backup writes it to one). */
int chassis_open_memory(size_t dims, const chassis_options *options, chassis_handle *handle);
/* Unflushed changes are discarded; the file stays as last flushed; the handle is gone. */
int chassis_close(chassis_handle handle);
/* Stop the long calls running on `handle` now (they return CHASSIS_INTERRUPTED); calls that
 * start later run as usual. From another thread; not from a signal handler (set a flag there). */
int chassis_interrupt(chassis_handle handle);

/* ---- writing ---- */
/* id: the caller's (NULL: the next free id); out_id: NULL or where the id goes. */
int chassis_add(chassis_handle handle, const float *vector, size_t dims, const uint64_t *id,
                uint64_t *out_id);
/* data: n x dims floats, row-major. All or nothing. ids, out_ids: NULL or n ids each.
 * threads 0: one per core. */
int chassis_add_batch(chassis_handle handle, const float *data, size_t n, size_t dims,
                      const uint64_t *ids, uint64_t *out_ids, size_t threads);
/* codes (8- or 4-bit): learn the quantizer from a sample instead of the first 1,000 rows. */
int chassis_train(chassis_handle handle, const float *sample, size_t n, size_t dims,
                  size_t threads);
/* CHASSIS_ID_NOT_FOUND when the id is not there. */
int chassis_delete(chassis_handle handle, uint64_t id);
/* Every id of ids (n) that is there, as one change; how many were to *deleted (NULL: not
 * wanted). Absent ids and repeats are skipped. */
int chassis_delete_batch(chassis_handle handle, const uint64_t *ids, size_t n, uint64_t *deleted);
/* data: n x dims; ids: n distinct ids. The rows of the ids there are replaced, the rest added;
 * all or nothing. How many were there to *replaced (NULL: not wanted). threads 0: one per core. */
int chassis_upsert(chassis_handle handle, const float *data, size_t n, size_t dims,
                   const uint64_t *ids, uint64_t *replaced, size_t threads);

/* ---- searching ---- */
/* The k nearest to `query`, nearest first: ids and distances hold k each (distances may be
 * NULL); slots past the results hold CHASSIS_NO_ID and infinity; found (NULL or) their
 * number. params NULL: the defaults. */
int chassis_search(chassis_handle handle, const float *query, size_t dims, size_t k,
                   const chassis_search_params *params, uint64_t *ids, float *distances,
                   size_t *found);
/* nq queries (nq x dims): nq x k ids and distances, row-major, padded as above. */
int chassis_search_batch(chassis_handle handle, const float *queries, size_t nq, size_t dims,
                         size_t k, const chassis_search_params *params, uint64_t *ids,
                         float *distances);

/* ---- reading ---- */
/* The stored vector (dims floats); CHASSIS_ID_NOT_FOUND when absent. */
int chassis_get(chassis_handle handle, uint64_t id, float *vector, size_t dims);
int chassis_contains(chassis_handle handle, uint64_t id, int *contains);
/* Live vectors searches see (a writer counts its unflushed adds). */
int chassis_count(chassis_handle handle, uint64_t *count);
int chassis_dims(chassis_handle handle, size_t *dims);
/* Live ids in insertion order: the first `capacity` into ids; *count = all of them. */
int chassis_ids(chassis_handle handle, uint64_t *ids, size_t capacity, uint64_t *count);

/* ---- committing ---- */
/* Every change since the last flush made durable: one commit, milliseconds. */
int chassis_flush(chassis_handle handle);
int chassis_rollback(chassis_handle handle);
/* The application's own number: committed by flush, restored by rollback. */
int chassis_user_version(chassis_handle handle, uint64_t *version);
int chassis_set_user_version(chassis_handle handle, uint64_t version);

/* ---- whole-index operations ---- */
/* A consistent copy of the last flush (a writer flushes first; an in-memory index writes what
 * it holds). An existing file is replaced only with overwrite non-zero and no writer on it. */
int chassis_backup(chassis_handle handle, const char *dest, int overwrite);
/* Take deleted vectors out of the graph's links, so that searches stop walking them (add_batch
 * and upsert do it first once deletes reach a sixteenth of the index); durable at the next
 * flush. *relinked (NULL: not wanted) gets how many live vectors were re-linked. */
int chassis_consolidate(chassis_handle handle, size_t threads, uint64_t *relinked);
/* Rewrite without deleted vectors (flushes first). */
int chassis_compact(chassis_handle handle, size_t threads);
/* Scan every vector and the graph. The caller sets report->size. */
int chassis_check(chassis_handle handle, chassis_check_report *report);

/* ---- memory (ADR-0016 huge pages, ADR-0019 background warm) ---- */
int chassis_use_huge_pages(chassis_handle handle);
int chassis_keep_small_pages(chassis_handle handle);
/* Read the index in on a background thread; returns at once. vectors 0: all but the full
 * vectors. */
int chassis_warm(chassis_handle handle, int vectors);
int chassis_wait_warm(chassis_handle handle);
int chassis_stop_warm(chassis_handle handle);
/* The caller sets stats->size. */
int chassis_get_memory_stats(chassis_handle handle, chassis_memory_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* CHASSIS_H */
