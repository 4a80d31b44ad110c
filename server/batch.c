/* batch.c — splitting a batch by kind. The parts keep FIFO order, and each
 * service sees an ordinary sched_batch holding only its own requests. */
#include "batch.h"

#include <stdlib.h>

struct batch_runner {
    attn_service *attn;
    embed_service *embed;
    sched_req **part[BATCH_NKINDS]; /* (max_batch_requests) each */
};

batch_runner *batch_runner_create(attn_service *attn, embed_service *embed,
                                  int32_t max_batch_requests) {
    batch_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->attn = attn;
    r->embed = embed;
    for (int k = 0; k < BATCH_NKINDS; k++)
        if (!(r->part[k] = calloc((size_t)max_batch_requests, sizeof *r->part[k]))) {
            batch_runner_destroy(r);
            return NULL;
        }
    return r;
}

void batch_runner_destroy(batch_runner *r) {
    if (!r)
        return;
    for (int k = 0; k < BATCH_NKINDS; k++)
        free(r->part[k]);
    free(r);
}

int batch_run(const sched_batch *b, void *ctx) {
    batch_runner *r = ctx;
    sched_batch part[BATCH_NKINDS];
    for (int k = 0; k < BATCH_NKINDS; k++)
        part[k] = (sched_batch){.reqs = r->part[k], .id = b->id, .start_ns = b->start_ns};
    /* Every request is at most one sequence's worth of the batch's
     * max_batch_requests, so each part fits its list. */
    for (int32_t i = 0; i < b->n_reqs; i++) {
        sched_req *req = b->reqs[i];
        sched_batch *p = &part[SCHED_CONTAINER_OF(req, batch_job, sreq)->kind];
        r->part[p - part][p->n_reqs++] = req;
        p->n_seqs += req->n_seqs;
        p->n_tokens += req->n_tokens;
    }
    /* Each service records per-request failures in its jobs; a failure of
     * the whole part (none today) fails the batch. */
    int rc = 0;
    if (part[BATCH_ATTENTION].n_reqs)
        rc = attn_service_run_batch(&part[BATCH_ATTENTION], r->attn);
    if (part[BATCH_EMBED].n_reqs) {
        int e = embed_service_run_batch(&part[BATCH_EMBED], r->embed);
        rc = rc ? rc : e;
    }
    return rc;
}
