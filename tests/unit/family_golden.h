/* family_golden.h — what each family's model test does with its tiny
 * checkpoint and float64 golden vectors (tests/golden/<family>_embeddings
 * .json): embed every golden input in one packed batch through the encoder
 * interface, compare at a floor on every backend and precision, and show a
 * building block matters on an edited copy of the checkpoint
 * (model_variant.h makes the copy). Written once for every family's test
 * file: a family describes itself in a fam_model and calls these. */
#ifndef TEST_FAMILY_GOLDEN_H
#define TEST_FAMILY_GOLDEN_H

#include "golden_embeddings.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "model/encoder.h"

/* One family's checkpoint and golden file. */
typedef struct fam_model {
    const char *family; /* names its runs on stderr */
    const char *dir;    /* the model directory */
    const char *golden; /* the golden file */
    /* The golden sets the backend loops check, NULL-terminated. */
    const char *const *sets;
    int threads;
    /* What a backend may name when it refuses the model's shape, besides a
     * missing instruction set (NULL: nothing). */
    const char *allowed_refusal;
    /* Where set, backends it says lack a capability of the model are skipped
     * before loading (said on stderr). */
    int (*refused)(const char *dir, const char *backend);
} fam_model;

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

/* Golden set `set` of m's golden file (asserts it loads). */
golden_set fam_load_golden(const fam_model *m, const char *set);

/* Set `set` through m's model with backend `name` and precision p, each
 * vector expected >= floor (skipped as fam_embed_all and m->refused say):
 * the lowest cosine, or 2 where skipped. */
double fam_check_golden(const fam_model *m, const char *set, const char *name, gemm_precision p,
                        double floor);

/* fam_check_golden on every backend and every set of m, at precision p:
 * floor for the fp32 backends, floor_bf16 for those that compute in bf16. */
void fam_golden_every_backend(const fam_model *m, gemm_precision p, double floor,
                              double floor_bf16);

/* int8 GEMMs (naive backend) on `set`, against fp32 (the same C model) and
 * against the golden, each cosine expected >= floor. */
void fam_golden_int8(const fam_model *m, const char *set, double floor);

/* The highest cosine any input of `set` of more than min_len tokens
 * reaches against the golden with the model at dir (m's edited copy; fp32,
 * naive, one thread). */
double fam_best_cosine(const fam_model *m, const char *set, const char *dir, int min_len);

/* A block matters: with the model at dir (m's copy with the block
 * changed), the best input of `set` past min_len tokens (fam_best_cosine)
 * stays below floor; said on stderr as "<family> <what>: ...". */
void fam_expect_off_floor(const fam_model *m, const char *set, const char *dir, int min_len,
                          double floor, const char *what);

/* Each input of g alone through e with backend be (one thread, a workspace
 * of max_tokens): the highest cosine any input of more than min_len tokens
 * reaches against g's vectors. */
double fam_best_cosine_each(encoder *e, const attn_backend *be, const golden_set *g, int max_tokens,
                            int min_len);

/* The C tokenizer of the model at dir gives the ids of every input of g
 * (an output of capacity ids). */
void fam_check_token_ids(const char *dir, const golden_set *g, int capacity);

/* The C tokenizer of m's model gives the ids of every input of `set`. */
void fam_tokenizer_gives_the_golden_ids(const fam_model *m, const char *set);

/* The model at dir (fp32) refuses backend table old, named "old" and
 * lacking a capability the model needs, when a workspace is made for it:
 * BERT_EUNSUPPORTED with a message naming the table and want. */
void fam_expect_backend_refused(const char *dir, const attn_backend *old, const char *want);

#endif
