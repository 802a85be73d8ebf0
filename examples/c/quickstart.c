/*
 * Chassis from C: create an index, add a batch, flush, search, read it back as a reader.
 *
 *   cargo build --release
 *   cc examples/c/quickstart.c -Iinclude -Ltarget/release -lchassis \
 *      -Wl,-rpath,"$PWD/target/release" -lm -o quickstart
 *   ./quickstart quickstart.chassis
 *
 * Run by `cargo test` (tests/capi.rs), which builds it against the library it just built.
 */
#include "chassis.h"

#include <stdio.h>
#include <stdlib.h>

#define DIMS 64
#define ROWS 2000

/* Stop with the status's name and the library's message (with its help: line). */
static void check(int status, const char *what) {
    if (status != CHASSIS_OK) {
        fprintf(stderr, "%s: %s\n%s\n", what, chassis_status_name(status), chassis_last_error());
        exit(1);
    }
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "quickstart.chassis";
    float *data = malloc(sizeof(float) * ROWS * DIMS);
    for (size_t i = 0; i < (size_t)ROWS * DIMS; i++) data[i] = (float)rand() / RAND_MAX;

    chassis_options options;
    check(chassis_options_init(&options, sizeof options), "options");
    options.metric = CHASSIS_METRIC_COSINE;

    /* A writer: creates the file when it is missing. */
    chassis_handle index;
    check(chassis_open(path, DIMS, &options, &index), "open");
    uint64_t before;
    check(chassis_count(index, &before), "count");
    check(chassis_add_batch(index, data, ROWS, DIMS, NULL, NULL, 0), "add_batch");
    check(chassis_flush(index), "flush");

    /* A reader (any process may open one) sees the flush. */
    chassis_handle reader;
    check(chassis_open_read_only(path, NULL, &reader), "open_read_only");
    uint64_t ids[5];
    float distances[5];
    size_t found;
    check(chassis_search(reader, data, DIMS, 5, NULL, ids, distances, &found), "search");
    printf("%llu vectors before, %llu added; nearest to the first row:\n",
           (unsigned long long)before, (unsigned long long)ROWS);
    for (size_t i = 0; i < found; i++)
        printf("  id %llu at distance %.4f\n", (unsigned long long)ids[i], distances[i]);

    check(chassis_close(reader), "close");
    check(chassis_close(index), "close");
    free(data);
    return 0;
}
