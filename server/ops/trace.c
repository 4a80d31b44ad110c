/* trace.c — the ring of trace lines and the thread that writes them (see
 * trace.h). */
#include "server/ops/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/work/ticks.h"

#define PATH_MAX_LEN 4096

struct tracer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* writer: lines queued, a new path, or stop */
    pthread_cond_t idle_cv; /* trace_flush: ring empty and written */
    char (*ring)[TRACE_LINE_MAX];
    uint32_t len[TRACE_RING];
    uint32_t head, count; /* guarded by mu */
    bool writing;         /* the writer holds a line it has not yet written */
    bool stopping;
    char path[PATH_MAX_LEN]; /* guarded by mu */
    bool path_changed;
    _Atomic bool enabled;
    _Atomic uint64_t written, dropped;
};

static void *writer_main(void *arg) {
    tracer *t = arg;
    pthread_setname_np(pthread_self(), "attn-trace");
    FILE *f = NULL;
    char line[TRACE_LINE_MAX + 1];
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->count && !t->path_changed && !t->stopping)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->path_changed) {
            char path[PATH_MAX_LEN];
            memcpy(path, t->path, sizeof path);
            t->path_changed = false;
            pthread_mutex_unlock(&t->mu);
            if (f)
                fclose(f);
            f = NULL;
            if (path[0] && !(f = fopen(path, "a")))
                log_error("cannot open trace_file; tracing off", LOG_KV("path", path),
                          LOG_KV("error", strerror(errno)));
            pthread_mutex_lock(&t->mu);
            pthread_cond_broadcast(&t->idle_cv);
            continue;
        }
        if (!t->count) { /* stopping, everything written */
            break;
        }
        const uint32_t n = t->len[t->head];
        memcpy(line, t->ring[t->head], n);
        t->head = (t->head + 1) % TRACE_RING;
        t->count--;
        t->writing = true;
        pthread_mutex_unlock(&t->mu);

        line[n] = '\n';
        const bool ok = f && fwrite(line, 1, n + 1, f) == n + 1;
        atomic_fetch_add(ok ? &t->written : &t->dropped, 1);
        metrics_trace_line(ok);

        pthread_mutex_lock(&t->mu);
        t->writing = false;
        if (!t->count) {
            /* Flush when the ring runs dry, so a reader sees whole batches
             * soon without a flush per line under load. */
            if (f)
                fflush(f);
            pthread_cond_broadcast(&t->idle_cv);
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (f)
        fclose(f);
    return NULL;
}

tracer *trace_create(const char *path, char *err, size_t err_len) {
    tracer *t = calloc(1, sizeof *t);
    if (!t || !(t->ring = malloc((size_t)TRACE_RING * TRACE_LINE_MAX))) {
        free(t);
        snprintf(err, err_len, "cannot allocate the trace buffer");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->idle_cv, NULL);
    if (pthread_create(&t->thread, NULL, writer_main, t) != 0) {
        snprintf(err, err_len, "cannot start the trace writer thread");
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        pthread_cond_destroy(&t->idle_cv);
        free(t->ring);
        free(t);
        return NULL;
    }
    trace_set_path(t, path);
    return t;
}

void trace_destroy(tracer *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->idle_cv);
    free(t->ring);
    free(t);
}

size_t trace_bytes(const tracer *t) {
    return t ? sizeof *t + (size_t)TRACE_RING * TRACE_LINE_MAX : 0;
}

void trace_set_path(tracer *t, const char *path) {
    if (!path)
        path = "";
    pthread_mutex_lock(&t->mu);
    /* The same path again (a reload) reopens it too, so a rotated file is
     * followed. */
    if (path[0] || t->path[0]) {
        snprintf(t->path, sizeof t->path, "%s", path);
        t->path_changed = true;
        pthread_cond_signal(&t->cv);
    }
    atomic_store(&t->enabled, path[0] != '\0');
    pthread_mutex_unlock(&t->mu);
}

bool trace_enabled(const tracer *t) {
    return t && atomic_load_explicit(&((tracer *)t)->enabled, memory_order_relaxed);
}

bool trace_emit(tracer *t, const char *line, size_t len) {
    if (!trace_enabled(t) || len >= TRACE_LINE_MAX)
        return false;
    pthread_mutex_lock(&t->mu);
    const bool room = t->count < TRACE_RING;
    if (room) {
        const uint32_t at = (t->head + t->count) % TRACE_RING;
        memcpy(t->ring[at], line, len);
        t->len[at] = (uint32_t)len;
        t->count++;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    if (!room) {
        atomic_fetch_add(&t->dropped, 1);
        metrics_trace_line(false);
    }
    return room;
}

bool trace_flush(tracer *t, int64_t timeout_ms) {
    const struct timespec until = ticks_after_ms(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    while ((t->count || t->writing || t->path_changed) && rc == 0)
        rc = pthread_cond_timedwait(&t->idle_cv, &t->mu, &until);
    const bool done = !t->count && !t->writing && !t->path_changed;
    pthread_mutex_unlock(&t->mu);
    return done;
}

uint64_t trace_lines_written(const tracer *t) {
    return atomic_load(&((tracer *)t)->written);
}

uint64_t trace_lines_dropped(const tracer *t) {
    return atomic_load(&((tracer *)t)->dropped);
}
