/* job_tokens.c — an embed_job's token arrays (job_tokens.h). */
#include "server/api/job_tokens.h"

#include <string.h>

#include "server/work/membudget.h"

embed_job *job_tokens_new(int32_t n) {
    embed_job *job = membudget_calloc(1, sizeof *job);
    if (!job || !(job->cu = membudget_calloc((size_t)n + 1, sizeof *job->cu))) {
        membudget_free(job);
        return NULL;
    }
    job->n = n;
    return job;
}

int job_tokens_reserve(embed_job *job, size_t have, size_t more, bool types) {
    if (have + more <= job->ids_cap && (!types || job->type_ids))
        return 0;
    size_t cap = job->ids_cap ? job->ids_cap : 256;
    while (cap < have + more)
        cap *= 2;
    int32_t *ids = membudget_realloc(job->ids, cap * sizeof *ids);
    if (!ids)
        return -1;
    job->ids = ids;
    if (types) {
        int32_t *t = membudget_realloc(job->type_ids, cap * sizeof *t);
        if (!t)
            return -1;
        job->type_ids = t;
    }
    /* Only now: both arrays hold cap ints. */
    job->ids_cap = cap;
    return 0;
}

int job_tokens_encode_left(const tok_tokenizer *tok, const char *text, size_t len, int32_t least,
                           tok_output *o) {
    int rc = tok_encode(tok, text, len, 0, o);
    if (rc != TOK_ETOOLONG)
        return rc;
    tok_output all = {.capacity = o->n_full};
    all.ids = membudget_malloc((size_t)all.capacity * sizeof *all.ids);
    all.special = membudget_malloc((size_t)all.capacity * sizeof *all.special);
    rc = all.ids && all.special ? tok_encode(tok, text, len, 0, &all) : TOK_ENOMEM;
    if (rc == TOK_OK) {
        int32_t lead = 0, trail = 0;
        while (lead < all.n && all.special[lead])
            lead++;
        while (trail < all.n - lead && all.special[all.n - 1 - trail])
            trail++;
        const int32_t keep = o->capacity - lead - trail;
        if (keep < least || keep > all.n - lead - trail) {
            rc = TOK_EINVAL;
        } else {
            memcpy(o->ids, all.ids, (size_t)lead * sizeof *o->ids);
            memcpy(o->ids + lead, all.ids + all.n - trail - keep,
                   (size_t)(keep + trail) * sizeof *o->ids);
            o->n = o->capacity;
            if (o->type_ids)
                memset(o->type_ids, 0, (size_t)o->n * sizeof *o->type_ids);
        }
    }
    membudget_free(all.ids);
    membudget_free(all.special);
    return rc;
}

int job_tokens_encode_whole(const tok_tokenizer *tok, const char *text, size_t len, int32_t guess,
                            tok_output *o) {
    /* tok_encode refuses room for fewer than the specials outright
     * (TOK_EINVAL, no count). */
    const int32_t least = tok_num_special(tok) + 1;
    *o = (tok_output){.capacity = guess > least ? guess : least};
    int rc = TOK_ETOOLONG;
    for (int pass = 0; pass < 2 && rc == TOK_ETOOLONG; pass++) {
        if (pass)
            o->capacity = o->n_full;
        membudget_free(o->ids);
        membudget_free(o->offsets);
        o->ids = membudget_malloc((size_t)o->capacity * sizeof *o->ids);
        o->offsets = membudget_malloc((size_t)o->capacity * sizeof *o->offsets);
        rc = o->ids && o->offsets ? tok_encode(tok, text, len, 0, o) : TOK_ENOMEM;
    }
    return rc;
}

int job_tokens_refuse(int rc, int32_t i, size_t error_at, int oom, srv_refusal *r) {
    if (rc == TOK_EUTF8)
        return refuse(r, SRV_EBADREQUEST, "input %d is not valid UTF-8 (byte %zu)", (int)i,
                      error_at);
    if (rc == TOK_ECOMPLEX)
        return refuse(r, SRV_ETOKENIZER, "input %d: %s", (int)i, tok_strerror(rc));
    if (rc == TOK_ENOMEM)
        return refuse(r, oom, "out of memory");
    return refuse(r, SRV_EINTERNAL, "tokenizer: %s", tok_strerror(rc));
}

int job_tokens_seal(embed_job *job, int32_t max_batch_tokens, int out_dim, int kind, uint32_t group,
                    int oom, srv_refusal *r) {
    for (int32_t i = 0; i < job->n; i++)
        if (job->cu[i + 1] - job->cu[i] > max_batch_tokens)
            return refuse(r, SRV_EINVALID,
                          "input %d has %d tokens; a batch holds at most %d (max_batch_tokens)",
                          (int)i, (int)(job->cu[i + 1] - job->cu[i]), (int)max_batch_tokens);
    job->out_dim = out_dim;
    job->out = membudget_malloc((size_t)job->n * (size_t)out_dim * sizeof *job->out);
    if (!job->out)
        return refuse(r, oom, "out of memory");
    job->base.kind = kind;
    job->base.sreq.group = group;
    job->base.n_items = job->n;
    job->base.items_cu = job->cu;
    return SRV_OK;
}
