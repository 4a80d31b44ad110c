/* golden_io.h — reads the golden data of tests/golden for the unit tests,
 * the benchmarks and the GPU checks. The large goldens are gzipped compact
 * JSON (NAME.json.gz, written by tests/golden/golden_io.py), the small ones
 * plain JSON; one reader takes both, so a caller names the file and never
 * the form. */
#ifndef TEST_GOLDEN_IO_H
#define TEST_GOLDEN_IO_H

#include <jansson.h>
#include <stddef.h>

/* The JSON value in path (NAME.json or NAME.json.gz), parsed by jansson
 * with flags as json_load_file would parse the plain text. NULL when the
 * file cannot be opened, read or parsed, with error filled as jansson fills
 * it and error->source set to path. */
json_t *golden_load_json(const char *path, size_t flags, json_error_t *error);

/* cos(a, b) over n floats, summed in double: how the tests and benchmarks
 * hold a vector to its golden or to another precision's. */
double golden_cosine(const float *a, const float *b, int n);

#endif
