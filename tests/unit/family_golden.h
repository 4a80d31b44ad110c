/* family_golden.h — what each family's model test does with its tiny
 * checkpoint and float64 golden vectors (tests/golden/<family>_embeddings
 * .json): embed every golden input in one packed batch through the encoder
 * interface, compare at a floor, and make edited copies of the checkpoint
 * that show a building block matters. Written once for every family's
 * test file. */
#ifndef TEST_FAMILY_GOLDEN_H
#define TEST_FAMILY_GOLDEN_H

#include "golden_embeddings.h"
#include "kernels/gemm.h"

/* cos(a, b) over n floats, summed in double. */
double fam_cosine(const float *a, const float *b, int n);

/* Every input of g in one packed batch through the model at dir, with
 * backend `name` and precision p, on `threads` workers: the vectors (n ×
 * dim, malloc'd), or NULL when this CPU lacks the precision or the backend
 * refuses the model's shape (said on stderr; a refusal other than for a
 * missing instruction set or a capability named in allowed_refusal —
 * NULL: none — fails the test). */
float *fam_embed_all(const char *dir, const golden_set *g, const char *name, gemm_precision p,
                     int threads, const char *allowed_refusal);

/* The lowest cosine of out against g's vectors, each expected >= floor;
 * label names the run on stderr. */
double fam_check_against(const golden_set *g, const float *out, const char *label, double floor);

/* A copy of src in a fresh directory under /tmp (dir, 64 bytes), and its
 * removal. */
void fam_copy_model(const char *src, char *dir);
void fam_remove_model(const char *dir);

/* Overwrites tensor name of dir/model.safetensors with its dtype's value
 * `one ? 1.0 : 0.0` in place (F32, F16 or BF16). */
void fam_fill_tensor(const char *dir, const char *name, int one);

/* Sets key of the JSON object in dir/rel to value (JSON text). */
void fam_edit_json(const char *dir, const char *rel, const char *key, const char *value);

#endif
