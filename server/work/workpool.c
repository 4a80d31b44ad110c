/* workpool.c — threads, a mutex, a condition variable and a FIFO list. */
#include "server/work/workpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "server/work/ticks.h"

struct workpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    workpool_task *head, *tail; /* under mu */
    uint64_t waiting;           /* under mu */
    bool stopping;              /* under mu */
    bool joined;
    _Atomic uint64_t busy_ns;
    unsigned n;
    pthread_t *threads;
};

static void *worker_main(void *arg) {
    workpool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        workpool_task *t = p->head;
        if (!t)
            break; /* stopping, and nothing left */
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
        p->waiting--;
        pthread_mutex_unlock(&p->mu);
        const uint64_t t0 = ticks_now_ns();
        t->run(t);
        atomic_fetch_add_explicit(&p->busy_ns, ticks_now_ns() - t0, memory_order_relaxed);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

workpool *workpool_create(unsigned n, const char *name) {
    workpool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = calloc(n ? n : 1, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (unsigned i = 0; i < (n ? n : 1); i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            workpool_destroy(p);
            return NULL;
        }
        p->n++;
        char tname[32]; /* cut to the kernel's 16 bytes, terminator included */
        snprintf(tname, sizeof tname, "%.9s-%u", name, i);
        tname[15] = '\0';
        pthread_setname_np(p->threads[i], tname);
    }
    return p;
}

bool workpool_post(workpool *p, workpool_task *t) {
    pthread_mutex_lock(&p->mu);
    const bool ok = !p->stopping;
    if (ok) {
        t->next = NULL;
        if (p->tail)
            p->tail->next = t;
        else
            p->head = t;
        p->tail = t;
        p->waiting++;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void workpool_stop(workpool *p) {
    if (p->joined)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
    p->joined = true;
}

void workpool_destroy(workpool *p) {
    if (!p)
        return;
    workpool_stop(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

unsigned workpool_size(const workpool *p) {
    return p->n;
}

uint64_t workpool_waiting(workpool *p) {
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->waiting;
    pthread_mutex_unlock(&p->mu);
    return n;
}

double workpool_busy_seconds(workpool *p) {
    return (double)atomic_load_explicit(&p->busy_ns, memory_order_relaxed) * 1e-9;
}

/* The CPU time a cgroup v2 quota allows, in whole CPUs rounded up (a
 * container's --cpus, a pod's CPU limit); 0: no quota. */
static unsigned cgroup_cpus(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f)
        return 0;
    char quota[32] = "";
    unsigned long period = 0;
    const int n = fscanf(f, "%31s %lu", quota, &period);
    fclose(f);
    char *end;
    const unsigned long q = strtoul(quota, &end, 10);
    if (n != 2 || *end || !q || !period)
        return 0; /* "max": none */
    return (unsigned)((q + period - 1) / period);
}

unsigned workpool_default_size(long n) {
    if (n > 0)
        return (unsigned)n;
    /* The CPUs this process may run on (a container's cpuset, within its
     * quota), not every core of the machine. */
    unsigned cpus = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        cpus = (unsigned)CPU_COUNT(&set);
    if (!cpus) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        cpus = online > 0 ? (unsigned)online : 1;
    }
    const unsigned quota = cgroup_cpus();
    return quota && quota < cpus ? quota : cpus;
}
