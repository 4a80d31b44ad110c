/* fields.h — what a request's JSON object may hold, as a table, and the one
 * decoder that reads any dialect's object against its table.
 *
 * A dialect describes its body as a const array of rows, one per field: the
 * name, the JSON type, whether it is required, whether null counts as
 * absent, a default, bounds or choices, the `param` OpenAI's error body
 * names, and where the value goes (an offset into the dialect's request
 * struct). fld_decode() checks an object against the table and writes every
 * unknown-field, missing-field, type and range error through one refusal
 * (errors.h), worded the same for every dialect; each route answers it in
 * its own error shape. Checks that span fields (an overlap against a window,
 * a model against its task) stay with the route, after the decoding. */
#ifndef ATTN_FIELDS_H
#define ATTN_FIELDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/errors.h"

/* A field's JSON type and what its slot holds. */
typedef enum fld_type {
    FLD_ANY,    /* any value, json_t *: the route reads it further (inputs) */
    FLD_BOOL,   /* true or false, bool */
    FLD_INT,    /* an integer within [min, max], int64_t */
    FLD_STRING, /* a string, json_t * (it may hold U+0000; its length is the JSON's) */
    FLD_OBJECT, /* an object, json_t * */
    FLD_ENUM,   /* one of choices' names, int: the choice's value */
} fld_type;

enum {
    FLD_REQUIRED = 1u << 0, /* absent is "missing field" (400) */
    FLD_NULL = 1u << 1,     /* null is a value (checked as any other) rather than absent */
    FLD_PRESET = 1u << 2,   /* absent leaves the slot as the caller set it (a setting's default) */
};

/* How an integer out of bounds is worded (422). */
typedef enum fld_range {
    FLD_RANGE_IN,       /* "X is 9; it must be in 1..8" */
    FLD_RANGE_MODEL,    /* "X is 9; this model allows 1..8" */
    FLD_RANGE_AT_LEAST, /* "X must be at least 1" */
} fld_range;

typedef struct fld_choice {
    const char *name;
    int value;
} fld_choice;

typedef struct fld_row {
    const char *name;
    fld_type type;
    unsigned flags;   /* FLD_REQUIRED, FLD_NULL, FLD_PRESET */
    size_t at;        /* offsetof the slot in the request struct */
    int64_t dflt;     /* FLD_BOOL, FLD_INT, FLD_ENUM: the value when absent */
    int64_t min, max; /* FLD_INT: always checked; INT64_MIN, INT64_MAX for none */
    fld_range range;
    /* FLD_INT's bounds when they are the model's or a setting's (the
     * decoder's ctx): replace min and max. */
    void (*bounds)(const void *ctx, int64_t *min, int64_t *max);
    const fld_choice *choices; /* FLD_ENUM: ended by a NULL name */
    const char *param;         /* the error body's `param`; NULL: null */
    /* The whole message for a value outside the choices or the bounds, and
     * for one of the wrong type; NULL: the usual wording. */
    const char *msg, *type_msg;
    /* Checks on the value that need the route's context (the served model's
     * names), after its type; returns SRV_OK or refuses. */
    int (*check)(const void *ctx, const json_t *v, srv_refusal *r);
} fld_row;

typedef struct fld_table {
    const fld_row *rows;
    size_t n;
    const char *prefix; /* before a field's name in messages ("chunking."), or NULL */
    const char *param;  /* an unknown field's `param`; NULL: null */
    bool open;          /* members the table does not name are ignored, not refused */
} fld_table;

#define FLD_TABLE(rows, prefix, param)                                                             \
    { (rows), sizeof(rows) / sizeof((rows)[0]), (prefix), (param), false }
#define FLD_OPEN_TABLE(rows)                                                                       \
    { (rows), sizeof(rows) / sizeof((rows)[0]), NULL, NULL, true }

/* Decodes obj (an object) against t into out, a struct the rows' offsets
 * point into: the first unknown member refused in obj's order, naming every
 * field of t (unless t is open); then each row in t's order checked and stored. ctx goes to the
 * rows' bounds and check. Returns SRV_OK, or the refusal's code with r set
 * (its param the row's). */
int fld_decode(const fld_table *t, const json_t *obj, void *out, const void *ctx, srv_refusal *r);

#endif
