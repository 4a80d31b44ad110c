/* embed_offload.c — the tokenization thread: decodes parked embeddings
 * requests in arrival order and resumes them. */
#include "embed_offload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "embed_chunk.h"
#include "errors.h"
#include "job.h"
#include "membudget.h"

struct embed_offload_task {
    http_request *req;
    json_t *root; /* the parsed body, freed by the thread once decoded */
    embed_decode_fn fn;
    void *ctx;
    void (*release)(void *job); /* frees what fn gives */
    atomic_bool closed;         /* the client went away: nothing to decode for */
    /* Written by the thread before http_resume, read by the resumed handler. */
    embed_job *job;
    embed_refusal r;
    int budget_err; /* SRV_OK, or the budget's refusal */
    char budget_msg[160];
    struct embed_offload_task *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    _Atomic bool started; /* read by the I/O thread, set by start and stop */
    bool stopping;        /* under mu */
    struct embed_offload_task *head, *tail;
    _Atomic size_t threshold;
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .threshold = 32768};

void embed_offload_set_threshold(size_t bytes) {
    atomic_store(&Q.threshold, bytes);
}

bool embed_offload_wanted(http_request *req) {
    size_t n = 0;
    http_body(req, &n);
    return atomic_load(&Q.started) && n > atomic_load(&Q.threshold);
}

void embed_offload_task_free(struct embed_offload_task *t) {
    if (!t)
        return;
    if (t->job)
        t->release(t->job);
    membudget_free(t);
}

/* The tokenization thread's part of a task. Nothing of t is touched after
 * http_resume: the resumed handler frees it. */
static void run(struct embed_offload_task *t) {
    http_request *req = t->req;
    if (!atomic_load(&t->closed)) {
        /* The request holds its body, its parse tree and the placeholder and
         * task (blocks of the charging allocator: 16-byte header each,
         * membudget.h) outside this scope. */
        membudget_enter(http_body_held(req) + membudget_cost(sizeof(embed_job) + 16) +
                        membudget_cost(sizeof *t + 16));
        t->job = t->fn(t->ctx, t->root, &t->r);
        if (!t->job && membudget_refused()) {
            t->budget_err = membudget_error();
            snprintf(t->budget_msg, sizeof t->budget_msg, "%s", membudget_message());
        }
        membudget_leave();
    }
    http_body_json_free(req, t->root);
    t->root = NULL;
    http_resume(req);
}

static void *thread_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&Q.mu);
    for (;;) {
        while (!Q.head && !Q.stopping)
            pthread_cond_wait(&Q.cv, &Q.mu);
        struct embed_offload_task *t = Q.head;
        if (!t)
            break; /* stopping, and nothing left */
        Q.head = t->next;
        if (!Q.head)
            Q.tail = NULL;
        pthread_mutex_unlock(&Q.mu);
        run(t);
        pthread_mutex_lock(&Q.mu);
    }
    pthread_mutex_unlock(&Q.mu);
    return NULL;
}

int embed_offload_start(void) {
    if (atomic_load(&Q.started))
        return 0;
    Q.stopping = false;
    if (pthread_create(&Q.thread, NULL, thread_main, NULL) != 0)
        return -1;
    atomic_store(&Q.started, true);
    return 0;
}

void embed_offload_stop(void) {
    if (!atomic_load(&Q.started))
        return;
    /* From here large bodies decode inline; one already deciding to come
     * here finds stopping set under mu and is refused. */
    atomic_store(&Q.started, false);
    pthread_mutex_lock(&Q.mu);
    Q.stopping = true;
    pthread_cond_signal(&Q.cv);
    pthread_mutex_unlock(&Q.mu);
    pthread_join(Q.thread, NULL);
}

/* http.c's watch thread: the client closed while the request was parked. */
static void client_closed(void *arg) {
    struct embed_offload_task *t = arg;
    atomic_store(&t->closed, true);
}

int embed_offload(http_request *req, json_t *root, embed_decode_fn fn, void *ctx) {
    return embed_offload_release(req, root, fn, ctx, embed_job_release);
}

int embed_offload_release(http_request *req, json_t *root, embed_decode_fn fn, void *ctx,
                          void (*release)(void *job)) {
    /* A placeholder job carries the task as the request's user data, so the
     * route's resumed handler and the request's end find and free it. */
    embed_job *ph = membudget_calloc(1, sizeof *ph);
    struct embed_offload_task *t = ph ? membudget_calloc(1, sizeof *t) : NULL;
    if (!t) {
        membudget_free(ph);
        http_body_json_free(req, root);
        if (membudget_refused())
            return http_reply_error(req, membudget_error(), "%s", membudget_message());
        return http_reply_error(req, SRV_EINTERNAL, "out of memory");
    }
    *t = (struct embed_offload_task){
        .req = req, .root = root, .fn = fn, .ctx = ctx, .release = release};
    ph->offload = t;
    pthread_mutex_lock(&Q.mu);
    if (Q.stopping) {
        /* The thread has stopped taking tasks, or is about to exit once
         * its queue is empty: a task queued now would never run, and its
         * suspended connection would outlive the daemon. */
        pthread_mutex_unlock(&Q.mu);
        embed_offload_task_free(t);
        membudget_free(ph);
        http_body_json_free(req, root);
        return http_reply_error(req, SRV_EUNAVAILABLE, "the service is shutting down");
    }
    /* Parked before the task is visible to the thread, so its resume always
     * follows the park (Q.mu before conns_mu; the watch's callback takes
     * neither). */
    http_set_user(req, ph, embed_job_release);
    http_park(req, client_closed, t);
    if (Q.tail)
        Q.tail->next = t;
    else
        Q.head = t;
    Q.tail = t;
    pthread_cond_signal(&Q.cv);
    pthread_mutex_unlock(&Q.mu);
    return HTTP_PARKED;
}

bool embed_offload_resumed(http_request *req, const embed_api *api, int *answered) {
    embed_job *ph = http_user(req);
    if (!ph || !ph->offload)
        return false;
    struct embed_offload_task *t = ph->offload;
    embed_job *job = t->job;
    t->job = NULL;
    if (!job) {
        if (t->budget_err != SRV_OK)
            *answered = http_reply_error(req, t->budget_err, "%s", t->budget_msg);
        else
            *answered = http_reply_error_at(req, t->r.err ? t->r.err : SRV_EINTERNAL, t->r.param,
                                            t->r.code, "%s", t->r.msg);
        return true;
    }
    /* The job takes the placeholder's place as the request's user data
     * (the placeholder frees the task: its release is read first). */
    void (*release)(void *) = t->release;
    http_set_user(req, NULL, NULL);
    embed_job_release(ph);
    if (release == embed_job_release) /* an embedding job: it may stream */
        *answered = embed_submit(req, api, job);
    else /* a scoring job: never streamed, freed by its own release */
        *answered =
            job_submit(req, &job->base, api->sched, atomic_load(&api->request_timeout_ms), release);
    return true;
}
