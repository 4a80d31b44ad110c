/* metrics.c — fixed slots of relaxed atomics, rendered as Prometheus text.
 *
 * Histogram buckets are stored per bucket (not cumulative) so an update is
 * one add; render accumulates them. Sums of seconds are kept in integer
 * nanoseconds so they need no compare-and-swap loop. */
#include "server/ops/metrics.h"
#include "server/work/membudget.h"
#include "server/work/workpool.h"

#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- histograms ---------------------------------------------------------- */

#define HIST_MAX_BUCKETS 16

typedef struct histogram {
    const double *bounds; /* upper bounds, increasing; +Inf is implicit */
    int nbounds;
    double sum_unit; /* sum is stored in units of this (1e-9: ns) */
    _Atomic uint64_t buckets[HIST_MAX_BUCKETS + 1];
    _Atomic uint64_t sum;
} histogram;

static const double time_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                     0.1,    0.25,  0.5,    1,     2.5,  5,     10};
static const double size_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
static const double token_bounds[] = {16, 64, 256, 1024, 4096, 16384, 65536, 262144};

#define NBOUNDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void hist_observe(histogram *h, double value) {
    int i = 0;
    while (i < h->nbounds && value > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    double units = value / h->sum_unit;
    atomic_fetch_add_explicit(&h->sum, units > 0 ? (uint64_t)llround(units) : 0,
                              memory_order_relaxed);
}

/* ---- the one set ---------------------------------------------------------- */

/* Statuses the service answers with; anything else shares the last slot. */
static const unsigned statuses[] = {0,   200, 400, 401, 404, 405, 413,
                                    415, 422, 429, 431, 500, 503, 504};
#define NSTATUS (NBOUNDS(statuses) + 1)

#define MAX_BACKENDS ATTN_MAX_BACKENDS

/* A served model's counters (render_models names them). */
enum {
    MODEL_BATCHES,
    MODEL_REQUESTS,
    MODEL_TOKENS,
    MODEL_ENGINE_NS,
    MODEL_FORWARDS,
    MODEL_ENGINE_MFLOP,
    MODEL_NCOUNTS
};

static struct {
    const char *version, *simd;
    time_t start_time;
    const char *routes[METRICS_MAX_ROUTES];
    int nroutes;
    _Atomic uint64_t requests[METRICS_MAX_ROUTES][NSTATUS];
    histogram duration[METRICS_MAX_ROUTES];
    histogram queue, inference, batch_size, batch_tokens;
    _Atomic uint64_t dropped;
    _Atomic uint64_t conns_closed[METRICS_CONN_NREASONS];
    _Atomic int64_t http_in_flight;
    _Atomic uint64_t kernel_ns[MAX_BACKENDS], kernel_calls[MAX_BACKENDS];
    _Atomic uint64_t kernel_mflop[MAX_BACKENDS];
    _Atomic uint64_t embedding_inputs, embedding_tokens;
    _Atomic uint64_t workspace_bytes;
    _Atomic uint64_t worst_case_bytes;
    _Atomic(const struct membudget *) budget;
    _Atomic(const attn_backend *) backend;
    _Atomic int ready;
    _Atomic(sched *) sched;
    _Atomic(struct workpool *) codec;
    /* Self-test outcomes, written at start before any reader exists. */
    struct {
        const char *simd; /* NULL: not self-tested */
        int passed;
        double max_error_ratio;
    } selftest[MAX_BACKENDS];
    _Atomic int fallback_active;
    /* Each served model (written at start before any reader exists): the
     * batches, requests and tokens it ran, and its engine's forwards. */
    struct {
        const char *name, *task, *engine, *precision;
        const char *attention; /* the engine's own attention kernel; NULL: none */
        _Atomic uint64_t count[MODEL_NCOUNTS];
    } model[METRICS_MAX_MODELS];
    int nmodels;
} M;

static void hist_setup(histogram *h, const double *bounds, int n, double unit) {
    h->bounds = bounds;
    h->nbounds = n;
    h->sum_unit = unit;
}

void metrics_init(const char *version, const char *simd) {
    M.version = version;
    M.simd = simd;
    M.start_time = time(NULL);
    for (int r = 0; r < METRICS_MAX_ROUTES; r++)
        hist_setup(&M.duration[r], time_bounds, NBOUNDS(time_bounds), 1e-9);
    hist_setup(&M.queue, time_bounds, NBOUNDS(time_bounds), 1e-9);
    hist_setup(&M.inference, time_bounds, NBOUNDS(time_bounds), 1e-9);
    hist_setup(&M.batch_size, size_bounds, NBOUNDS(size_bounds), 1);
    hist_setup(&M.batch_tokens, token_bounds, NBOUNDS(token_bounds), 1);
}

int metrics_route(const char *route) {
    for (int i = 0; i < M.nroutes; i++)
        if (strcmp(M.routes[i], route) == 0)
            return i;
    if (M.nroutes < METRICS_MAX_ROUTES - 1) {
        M.routes[M.nroutes] = route;
        return M.nroutes++;
    }
    return METRICS_MAX_ROUTES - 1;
}

static int status_slot(unsigned status) {
    for (int i = 0; i < NBOUNDS(statuses); i++)
        if (statuses[i] == status)
            return i;
    return NSTATUS - 1;
}

void metrics_request(int route, unsigned status, double queue_s, double inference_s,
                     double total_s) {
    if (route < 0 || route >= METRICS_MAX_ROUTES)
        route = METRICS_MAX_ROUTES - 1;
    atomic_fetch_add_explicit(&M.requests[route][status_slot(status)], 1, memory_order_relaxed);
    hist_observe(&M.duration[route], total_s);
    if (status == 0)
        atomic_fetch_add_explicit(&M.dropped, 1, memory_order_relaxed);
    /* Only requests that went through the scheduler have queue and compute
     * times; counting zeros for the rest would hide the real ones. */
    if (queue_s > 0 || inference_s > 0) {
        hist_observe(&M.queue, queue_s);
        hist_observe(&M.inference, inference_s);
    }
}

void metrics_connection_closed(int reason) {
    if (reason >= 0 && reason < METRICS_CONN_NREASONS)
        atomic_fetch_add_explicit(&M.conns_closed[reason], 1, memory_order_relaxed);
}

void metrics_batch(const sched_batch *b) {
    hist_observe(&M.batch_size, (double)b->n_reqs);
    hist_observe(&M.batch_tokens, (double)b->n_tokens);
}

int metrics_add_model(const char *name, const char *task, const char *engine,
                      const char *precision) {
    if (M.nmodels == METRICS_MAX_MODELS)
        return -1;
    M.model[M.nmodels].name = name;
    M.model[M.nmodels].task = task;
    M.model[M.nmodels].engine = engine;
    M.model[M.nmodels].precision = precision;
    M.model[M.nmodels].attention = NULL;
    return M.nmodels++;
}

void metrics_set_model_attention(int slot, const char *kernel) {
    if (slot >= 0 && slot < M.nmodels)
        M.model[slot].attention = kernel;
}

void metrics_model_batch(int slot, const sched_batch *b) {
    if (slot < 0 || slot >= M.nmodels)
        return;
    _Atomic uint64_t *c = M.model[slot].count;
    atomic_fetch_add_explicit(&c[MODEL_BATCHES], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c[MODEL_REQUESTS], (uint64_t)b->n_reqs, memory_order_relaxed);
    atomic_fetch_add_explicit(&c[MODEL_TOKENS], (uint64_t)b->n_tokens, memory_order_relaxed);
}

static void gflops_add(int slot, double seconds, double flops); /* verification block below */

static int backend_slot(const attn_backend *backend) {
    const attn_backend *const *all = attn_backends();
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        if (all[i] == backend)
            return i;
    return -1;
}

void metrics_kernel(const attn_backend *backend, double seconds, double flops) {
    int i = backend_slot(backend);
    if (i < 0)
        return;
    atomic_fetch_add_explicit(&M.kernel_ns[i], (uint64_t)llround(seconds * 1e9),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&M.kernel_calls[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&M.kernel_mflop[i], (uint64_t)llround(flops * 1e-6),
                              memory_order_relaxed);
    gflops_add(i, seconds, flops); /* attnserve_attention_kernel_flops_per_second */
}

void metrics_embeddings(uint64_t inputs, uint64_t tokens) {
    atomic_fetch_add_explicit(&M.embedding_inputs, inputs, memory_order_relaxed);
    atomic_fetch_add_explicit(&M.embedding_tokens, tokens, memory_order_relaxed);
}

void metrics_http_in_flight(int delta) {
    atomic_fetch_add_explicit(&M.http_in_flight, delta, memory_order_relaxed);
}

void metrics_set_workspace_bytes(size_t bytes) {
    atomic_store(&M.workspace_bytes, bytes);
}
void metrics_set_memory(size_t worst_case_bytes, const struct membudget *budget) {
    atomic_store(&M.worst_case_bytes, worst_case_bytes);
    atomic_store(&M.budget, budget);
}
void metrics_set_backend(const attn_backend *backend) {
    atomic_store(&M.backend, backend);
}
void metrics_set_ready(int ready) {
    atomic_store(&M.ready, ready);
}
void metrics_set_selftest(const attn_backend *backend, const char *simd, int passed,
                          double max_error_ratio) {
    int i = backend_slot(backend);
    if (i < 0)
        return;
    M.selftest[i].simd = simd;
    M.selftest[i].passed = passed;
    M.selftest[i].max_error_ratio = max_error_ratio;
}
void metrics_set_fallback_active(int active) {
    atomic_store(&M.fallback_active, active);
}
void metrics_set_codec(workpool *p) {
    atomic_store(&M.codec, p);
}

void metrics_set_scheduler(sched *s) {
    atomic_store(&M.sched, s);
}

/* ---- rendering ------------------------------------------------------------- */

static uint64_t load(_Atomic uint64_t *v) {
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void header(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t hist_count(histogram *h) {
    uint64_t n = 0;
    for (int i = 0; i <= h->nbounds; i++)
        n += load(&h->buckets[i]);
    return n;
}

/* labels is "" or `name="value"` without braces. */
static void render_hist(FILE *f, const char *name, const char *labels, histogram *h) {
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i <= h->nbounds; i++) {
        cum += load(&h->buckets[i]);
        if (i < h->nbounds)
            fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i],
                    (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                    (unsigned long long)cum);
    }
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    fprintf(f, "%s_sum%s%s%s %.9g\n", name, open, labels, close,
            (double)load(&h->sum) * h->sum_unit);
    fprintf(f, "%s_count%s%s%s %llu\n", name, open, labels, close, (unsigned long long)cum);
}

/* A histogram family without labels: its HELP and TYPE, then its series. */
static void hist_family(FILE *f, const char *name, const char *help, histogram *h) {
    header(f, name, "histogram", help);
    render_hist(f, name, "", h);
}

/* A family of one unlabelled series holding a count. */
static void count_family(FILE *f, const char *name, const char *type, const char *help,
                         uint64_t value) {
    header(f, name, type, help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)value);
}

/* A counter family with one series per attention backend: counts as they
 * are, or an amount (nanoseconds, MFLOP) times scale, in prec digits. */
static void backend_counts(FILE *f, const char *name, const char *help, _Atomic uint64_t *v) {
    const attn_backend *const *all = attn_backends();
    header(f, name, "counter", help);
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        fprintf(f, "%s{backend=\"%s\"} %llu\n", name, all[i]->name,
                (unsigned long long)load(&v[i]));
}

static void backend_amounts(FILE *f, const char *name, const char *help, _Atomic uint64_t *v,
                            double scale, int prec) {
    const attn_backend *const *all = attn_backends();
    header(f, name, "counter", help);
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        fprintf(f, "%s{backend=\"%s\"} %.*g\n", name, all[i]->name, prec,
                (double)load(&v[i]) * scale);
}

/* Slot METRICS_MAX_ROUTES - 1 takes routes registered past the limit. */
static const char *route_name(int r) {
    return r < M.nroutes ? M.routes[r] : "overflow";
}

static void render_requests(FILE *f) {
    header(f, "attnserve_http_requests_total", "counter",
           "HTTP requests by route and status; status \"undelivered\": the client went away "
           "before it had the answer. Route \"unparsed\": refused by libmicrohttpd before "
           "routing (bad Content-Length, chunk size, headers too large).");
    for (int r = 0; r < METRICS_MAX_ROUTES; r++)
        for (int s = 0; s < NSTATUS; s++) {
            uint64_t n = load(&M.requests[r][s]);
            if (!n)
                continue;
            if (s < NBOUNDS(statuses))
                if (statuses[s])
                    fprintf(f, "attnserve_http_requests_total{route=\"%s\",status=\"%u\"} %llu\n",
                            route_name(r), statuses[s], (unsigned long long)n);
                else
                    fprintf(f,
                            "attnserve_http_requests_total{route=\"%s\",status=\"undelivered\"} "
                            "%llu\n",
                            route_name(r), (unsigned long long)n);
            else
                fprintf(f, "attnserve_http_requests_total{route=\"%s\",status=\"other\"} %llu\n",
                        route_name(r), (unsigned long long)n);
        }
    header(f, "attnserve_http_request_duration_seconds", "histogram",
           "Time from request headers to the answer, by route.");
    for (int r = 0; r < METRICS_MAX_ROUTES; r++) {
        if (r >= M.nroutes && !(r == METRICS_MAX_ROUTES - 1 && hist_count(&M.duration[r])))
            continue;
        char label[128];
        snprintf(label, sizeof label, "route=\"%s\"", route_name(r));
        render_hist(f, "attnserve_http_request_duration_seconds", label, &M.duration[r]);
    }
    header(f, "attnserve_http_requests_in_flight", "gauge",
           "HTTP requests started and not yet completed.");
    fprintf(f, "attnserve_http_requests_in_flight %lld\n",
            (long long)atomic_load_explicit(&M.http_in_flight, memory_order_relaxed));
    workpool *codec = atomic_load(&M.codec);
    header(f, "attnserve_codec_workers", "gauge",
           "Threads that decode requests and write answers (codec_workers).");
    fprintf(f, "attnserve_codec_workers %u\n", codec ? workpool_size(codec) : 0);
    count_family(f, "attnserve_codec_tasks_waiting", "gauge",
                 "Requests waiting for a codec worker, to be decoded or answered.",
                 codec ? workpool_waiting(codec) : 0);
    header(f, "attnserve_codec_busy_seconds_total", "counter",
           "Time the codec workers spent decoding and answering, summed over them.");
    fprintf(f, "attnserve_codec_busy_seconds_total %.6f\n",
            codec ? workpool_busy_seconds(codec) : 0.0);
}

static void label_value(FILE *f, const char *v);

/* vLLM's two load gauges under vLLM's names, so that routers and autoscalers
 * written for vLLM (the production stack's router scrapes exactly these two
 * from /metrics) balance over attnserve as over vLLM: running is the batch
 * on the engine (attnserve_batch_requests_in_flight), waiting the queue
 * (attnserve_queue_depth), from the same snapshot. vLLM serves one model per
 * process and labels it model_name; one process here may serve several from
 * one queue, so the label is set only when there is one model and the value
 * always counts the whole process, which is the load a router compares. */
static void render_vllm_load(FILE *f, const sched_stats *st) {
    static const char *const names[] = {"vllm:num_requests_running", "vllm:num_requests_waiting"};
    static const char *const helps[] = {
        "vLLM's name for attnserve_batch_requests_in_flight: requests in the running batch.",
        "vLLM's name for attnserve_queue_depth: requests accepted and waiting for a batch."};
    const uint64_t values[] = {st->in_flight, st->queue_depth};
    for (int k = 0; k < 2; k++) {
        header(f, names[k], "gauge", helps[k]);
        fputs(names[k], f);
        if (M.nmodels == 1) {
            fputs("{model_name=\"", f);
            label_value(f, M.model[0].name);
            fputs("\"}", f);
        }
        fprintf(f, " %llu\n", (unsigned long long)values[k]);
    }
}

static void render_scheduler(FILE *f) {
    hist_family(f, "attnserve_request_queue_seconds",
                "Time a request waited in the queue before its batch started.", &M.queue);
    hist_family(f, "attnserve_request_inference_seconds",
                "Compute time of the batch a request ran in.", &M.inference);
    hist_family(f, "attnserve_batch_size", "Requests per batch.", &M.batch_size);
    hist_family(f, "attnserve_batch_tokens", "Tokens per batch.", &M.batch_tokens);

    sched_stats st = {0};
    sched *s = atomic_load(&M.sched);
    if (s)
        sched_stats_get(s, &st);
    count_family(f, "attnserve_queue_depth", "gauge", "Requests accepted and waiting for a batch.",
                 st.queue_depth);
    count_family(f, "attnserve_batch_requests_in_flight", "gauge", "Requests in the running batch.",
                 st.in_flight);
    render_vllm_load(f, &st);
    header(f, "attnserve_requests_rejected_total", "counter",
           "Requests refused at admission, by reason.");
    fprintf(f, "attnserve_requests_rejected_total{reason=\"queue_full\"} %llu\n",
            (unsigned long long)st.rejected_full);
    fprintf(f, "attnserve_requests_rejected_total{reason=\"too_big\"} %llu\n",
            (unsigned long long)st.rejected_too_big);
    fprintf(f, "attnserve_requests_rejected_total{reason=\"draining\"} %llu\n",
            (unsigned long long)st.rejected_closed);
    count_family(f, "attnserve_requests_timed_out_total", "counter",
                 "Requests whose deadline passed while queued (answered 504).", st.timed_out);
    /* Every request the scheduler cancels is one whose client went away
     * (http.c), which http.c counts as dropped too: count it once. */
    header(f, "attnserve_requests_dropped_total", "counter",
           "Requests whose client went away before the answer.");
    fprintf(f, "attnserve_requests_dropped_total{reason=\"client_closed\"} %llu\n",
            (unsigned long long)load(&M.dropped));
    count_family(f, "attnserve_requests_cancelled_total", "counter",
                 "Dropped requests taken out of the queue before they were computed.",
                 st.cancelled);
    header(f, "attnserve_connections_closed_total", "counter",
           "Connections closed by the service: refused past max_connections with none idle, "
           "idle ones closed to admit a new one at max_connections, those whose request was "
           "not in within connection_timeout_s, whose early 413 went out only in part, or "
           "whose request's length was ambiguous (400).");
    fprintf(f, "attnserve_connections_closed_total{reason=\"max_connections\"} %llu\n",
            (unsigned long long)load(&M.conns_closed[METRICS_CONN_LIMIT]));
    fprintf(f, "attnserve_connections_closed_total{reason=\"connection_timeout\"} %llu\n",
            (unsigned long long)load(&M.conns_closed[METRICS_CONN_LATE]));
    /* h-http2: an early 413 written only in part (http.c answer_too_large_now). */
    fprintf(f, "attnserve_connections_closed_total{reason=\"answer_cut\"} %llu\n",
            (unsigned long long)load(&M.conns_closed[METRICS_CONN_CUT]));
    fprintf(f, "attnserve_connections_closed_total{reason=\"evicted_idle\"} %llu\n",
            (unsigned long long)load(&M.conns_closed[METRICS_CONN_EVICTED]));
    fprintf(f, "attnserve_connections_closed_total{reason=\"bad_framing\"} %llu\n",
            (unsigned long long)load(&M.conns_closed[METRICS_CONN_FRAMING]));
    count_family(f, "attnserve_batches_total", "counter", "Batches run.", st.batches);
    count_family(f, "attnserve_embedding_inputs_total", "counter", "Embedding inputs computed.",
                 load(&M.embedding_inputs));
    count_family(f, "attnserve_embedding_tokens_total", "counter",
                 "Tokens of the embedding inputs computed.", load(&M.embedding_tokens));
}

static void render_kernels(FILE *f) {
    backend_amounts(f, "attnserve_attention_kernel_seconds_total",
                    "Wall time in attention forward calls, by backend.", M.kernel_ns, 1e-9, 9);
    backend_counts(f, "attnserve_attention_kernel_calls_total",
                   "Attention forward calls, by backend.", M.kernel_calls);
    backend_amounts(f, "attnserve_attention_kernel_flops_total",
                    "Floating-point operations of attention forward calls (MFLOP resolution), by "
                    "backend; divide its rate by the seconds' rate for GFLOP/s.",
                    M.kernel_mflop, 1e6, 6);
}

/* Prometheus spells infinities +Inf/-Inf; an output that was not finite
 * makes the self-test's ratio infinite. */
static void print_value(FILE *f, double v) {
    if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", f);
    else if (isnan(v))
        fputs("NaN", f);
    else
        fprintf(f, "%.9g", v);
}

static void render_safety(FILE *f) {
    const attn_backend *const *all = attn_backends();
    header(f, "attnserve_selftest_passed", "gauge",
           "1 when the backend passed its start-up self-test on this machine, 0 when it "
           "failed (and is not used).");
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        if (M.selftest[i].simd)
            fprintf(f, "attnserve_selftest_passed{backend=\"%s\",simd=\"%s\"} %d\n", all[i]->name,
                    M.selftest[i].simd, M.selftest[i].passed);
    header(f, "attnserve_selftest_max_error_over_bound", "gauge",
           "Largest error of the start-up self-test as a multiple of its allowed bound (<= 1 "
           "passes; unbounded above, +Inf for a non-finite output).");
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        if (M.selftest[i].simd) {
            fprintf(f, "attnserve_selftest_max_error_over_bound{backend=\"%s\",simd=\"%s\"} ",
                    all[i]->name, M.selftest[i].simd);
            print_value(f, M.selftest[i].max_error_ratio);
            fputc('\n', f);
        }
    header(f, "attnserve_backend_fallback_active", "gauge",
           "1 while the backend in force is not the one configured (self-test failure, "
           "refused shapes, or a switch while serving).");
    fprintf(f, "attnserve_backend_fallback_active %d\n", atomic_load(&M.fallback_active));
}

/* Resident set from /proc/self/statm (second field, in pages). */
static long long resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static long open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    long n = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

/* The worst case and the request-memory budget (membudget.h). */
static void render_memory(FILE *f) {
    count_family(f, "attnserve_memory_worst_case_bytes", "gauge",
                 "Most memory the configuration lets the service hold (GET /info memory).",
                 load(&M.worst_case_bytes));
    const membudget *b = atomic_load(&M.budget);
    if (!b)
        return;
    count_family(f, "attnserve_request_memory_limit_bytes", "gauge",
                 "max_request_memory_bytes: what all requests together may hold.", b->limit);
    count_family(f, "attnserve_request_memory_bytes", "gauge",
                 "Memory requests hold now (bodies, parsed JSON, jobs, responses).",
                 membudget_used(b));
    count_family(f, "attnserve_request_memory_peak_bytes", "gauge", "The most requests ever held.",
                 membudget_peak(b));
    count_family(f, "attnserve_request_memory_refusals_total", "counter",
                 "Charges refused because the budget was full (each fails its request).",
                 membudget_refusals(b));
}

static void render_process(FILE *f) {
    const attn_backend *b = atomic_load(&M.backend);
    /* Labels that never change while the process runs; the backend, which a
     * reload or a fallback changes, is attnserve_backend_active. */
    header(f, "attnserve_build_info", "gauge", "Version and the CPU's SIMD path.");
    fprintf(f, "attnserve_build_info{version=\"%s\",simd=\"%s\"} 1\n", M.version, M.simd);
    const attn_backend *const *all = attn_backends();
    header(f, "attnserve_backend_active", "gauge",
           "1 for the attention backend in force, 0 for every other one.");
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++)
        fprintf(f, "attnserve_backend_active{backend=\"%s\"} %d\n", all[i]->name, all[i] == b);
    header(f, "attnserve_ready", "gauge", "1 when /ready answers 200.");
    fprintf(f, "attnserve_ready %d\n", atomic_load(&M.ready));
    count_family(f, "attnserve_workspace_bytes", "gauge", "Compute workspace allocated at start.",
                 load(&M.workspace_bytes));
    render_memory(f);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    header(f, "process_cpu_seconds_total", "counter", "User and system CPU time.");
    fprintf(f, "process_cpu_seconds_total %.6f\n",
            (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6);
    header(f, "process_resident_memory_bytes", "gauge", "Resident memory size.");
    fprintf(f, "process_resident_memory_bytes %lld\n", resident_bytes());
    header(f, "process_open_fds", "gauge", "Open file descriptors.");
    fprintf(f, "process_open_fds %ld\n", open_fds());
    header(f, "process_start_time_seconds", "gauge", "Start time since the Unix epoch.");
    fprintf(f, "process_start_time_seconds %lld\n", (long long)M.start_time);
}

/* ---- shadow verification, fallback and GFLOP/s ------------------
 * Kept apart from the slots above so that the self-test half's metrics merge
 * beside it without touching it. */

static const double ratio_bounds[] = {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 100, 1000};
static const double abs_err_bounds[] = {1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1};

/* GFLOP/s over the last GF_SLOTS seconds: one slot per second of the
 * monotonic clock, per backend, each holding that second's kernel time and
 * work. A rolling window rather than an EWMA because a window's value is a
 * plain ratio of what ran in it (kernel FLOPs / kernel seconds) and reads
 * the same whatever the batch rate; an idle backend simply has no value. The
 * one writer is the compute thread (and the start-up self-test before it);
 * a scrape that races a slot's reset reads one second slightly off. */
#define GF_SLOTS 10
typedef struct gf_slot {
    _Atomic int64_t second; /* which monotonic second the slot holds */
    _Atomic uint64_t ns, kflop;
} gf_slot;

static struct {
    histogram max_ratio, mean_abs;
    _Atomic uint64_t batches[MAX_BACKENDS], mismatches[MAX_BACKENDS];
    _Atomic uint64_t skipped;
    _Atomic uint64_t trace_written, trace_dropped;
    gf_slot gf[MAX_BACKENDS][GF_SLOTS];
} V = {
    .max_ratio = {.bounds = ratio_bounds, .nbounds = NBOUNDS(ratio_bounds), .sum_unit = 1e-3},
    .mean_abs = {.bounds = abs_err_bounds, .nbounds = NBOUNDS(abs_err_bounds), .sum_unit = 1e-12},
};

static int64_t mono_second(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec;
}

static void gflops_add(int slot, double seconds, double flops) {
    const int64_t sec = mono_second();
    gf_slot *g = &V.gf[slot][sec % GF_SLOTS];
    if (atomic_load_explicit(&g->second, memory_order_relaxed) != sec) {
        atomic_store_explicit(&g->ns, 0, memory_order_relaxed);
        atomic_store_explicit(&g->kflop, 0, memory_order_relaxed);
        atomic_store_explicit(&g->second, sec, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&g->ns, (uint64_t)llround(seconds * 1e9), memory_order_relaxed);
    atomic_fetch_add_explicit(&g->kflop, (uint64_t)llround(flops * 1e-3), memory_order_relaxed);
}

/* Values past these are clamped for the histograms' sums (a non-finite
 * output gives an infinite error; the bucket still says +Inf). */
static double clamp_sum(double x, double cap) {
    return isfinite(x) && x < cap ? x : cap;
}

void metrics_verify(const attn_backend *backend, int mismatch, double max_ratio, double mean_abs) {
    int i = backend_slot(backend);
    if (i >= 0) {
        atomic_fetch_add_explicit(&V.batches[i], 1, memory_order_relaxed);
        if (mismatch)
            atomic_fetch_add_explicit(&V.mismatches[i], 1, memory_order_relaxed);
    }
    hist_observe(&V.max_ratio, clamp_sum(max_ratio, 1e9));
    /* Clamped at 1 (any larger mean error is a gross fault): with sum_unit
     * 1e-12 a non-finite check adds 1e12 units, so the sum lasts 1.8e7 of them. */
    hist_observe(&V.mean_abs, clamp_sum(mean_abs, 1.0));
}

void metrics_verify_skipped(void) {
    atomic_fetch_add_explicit(&V.skipped, 1, memory_order_relaxed);
}

void metrics_trace_line(int written) {
    atomic_fetch_add_explicit(written ? &V.trace_written : &V.trace_dropped, 1,
                              memory_order_relaxed);
}

static void render_verify(FILE *f) {
    const attn_backend *const *all = attn_backends();
    backend_counts(f, "attnserve_verify_batches_total",
                   "Sampled attention calls recomputed with the float64 reference, by backend.",
                   V.batches);
    backend_counts(f, "attnserve_verify_mismatches_total",
                   "Checked attention calls with an element past the error bound, by backend.",
                   V.mismatches);
    count_family(f, "attnserve_verify_skipped_total", "counter",
                 "Batches sampled for verification but not checked: the one capture slot was "
                 "busy (the checker still working, or the other kind of the same batch captured).",
                 load(&V.skipped));
    hist_family(f, "attnserve_verify_max_error_over_bound",
                "Per check, the largest |out - ref| as a multiple of its bound (above 1 is a "
                "mismatch).",
                &V.max_ratio);
    hist_family(f, "attnserve_verify_mean_abs_error",
                "Per check, the mean |out - ref| over the elements compared.", &V.mean_abs);
    count_family(f, "attnserve_trace_lines_total", "counter", "Trace lines written to trace_file.",
                 load(&V.trace_written));
    count_family(f, "attnserve_trace_lines_dropped_total", "counter",
                 "Trace lines dropped: the buffer was full or the file could not be written.",
                 load(&V.trace_dropped));

    header(f, "attnserve_attention_kernel_flops_per_second", "gauge",
           "Attention floating-point operations per second achieved over the last 10 s "
           "(kernel FLOPs / kernel seconds), by backend; absent for a backend that ran nothing "
           "in that time.");
    const int64_t now = mono_second();
    for (int i = 0; i < MAX_BACKENDS && all[i]; i++) {
        uint64_t ns = 0, kflop = 0;
        for (int j = 0; j < GF_SLOTS; j++) {
            gf_slot *g = &V.gf[i][j];
            const int64_t sec = atomic_load_explicit(&g->second, memory_order_relaxed);
            if (sec > now - GF_SLOTS && sec <= now) {
                ns += load(&g->ns);
                kflop += load(&g->kflop);
            }
        }
        if (ns > 0)
            fprintf(f, "attnserve_attention_kernel_flops_per_second{backend=\"%s\"} %.6g\n",
                    all[i]->name, (double)kflop * 1e12 / (double)ns);
    }
}

void metrics_engine_forward(int slot, double seconds, double flops) {
    if (slot < 0 || slot >= M.nmodels)
        return;
    _Atomic uint64_t *c = M.model[slot].count;
    atomic_fetch_add_explicit(&c[MODEL_ENGINE_NS], (uint64_t)llround(seconds * 1e9),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&c[MODEL_FORWARDS], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c[MODEL_ENGINE_MFLOP], (uint64_t)llround(flops * 1e-6),
                              memory_order_relaxed);
}

/* Model names are validated settings (letters, digits, ._-/:@+) or a
 * directory's last component, which could hold a quote, backslash or line
 * feed: those are escaped as the exposition format asks. */
static void label_value(FILE *f, const char *v) {
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            fputc('\\', f);
        if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

/* name{model="...",engine="...",key="value"} : a model's engine series, up
 * to its value; key is precision, or kernel for the attention kernel. */
static void engine_labels(FILE *f, const char *name, int i, const char *key, const char *value) {
    fprintf(f, "%s{model=\"", name);
    label_value(f, M.model[i].name);
    fputs("\",engine=\"", f);
    label_value(f, M.model[i].engine);
    fprintf(f, "\",%s=\"", key);
    label_value(f, value);
    fputs("\"} ", f);
}

/* A counter family with one series per model: labelled with the model's
 * engine and precision too, or with the model alone; the count as it is
 * (prec 0) or an amount (nanoseconds, MFLOP) times scale in prec digits. */
typedef struct model_family {
    const char *name, *help;
    int count; /* MODEL_* */
    bool engine;
    double scale;
    int prec;
} model_family;

static const model_family engine_families[] = {
    {"attnserve_engine_forward_seconds_total", "Wall time in each model's encoder forwards.",
     MODEL_ENGINE_NS, true, 1e-9, 9},
    {"attnserve_engine_forwards_total", "Encoder forwards run per model.", MODEL_FORWARDS, true, 1,
     0},
    {"attnserve_engine_flops_total",
     "Floating-point operations of each model's encoder forwards (GEMMs and attention).",
     MODEL_ENGINE_MFLOP, true, 1e6, 6},
};

static const model_family batch_families[] = {
    {"attnserve_model_batches_total",
     "Batches run per model (a batch holds one model's requests only).", MODEL_BATCHES, false, 1,
     0},
    {"attnserve_model_batch_requests_total",
     "Requests (or pieces of one) in the batches run per model.", MODEL_REQUESTS, false, 1, 0},
    {"attnserve_model_batch_tokens_total", "Tokens in the batches run per model.", MODEL_TOKENS,
     false, 1, 0},
};

static void render_model_families(FILE *f, const model_family *fam, int n) {
    for (int k = 0; k < n; k++) {
        header(f, fam[k].name, "counter", fam[k].help);
        for (int i = 0; i < M.nmodels; i++) {
            if (fam[k].engine) {
                engine_labels(f, fam[k].name, i, "precision", M.model[i].precision);
            } else {
                fprintf(f, "%s{model=\"", fam[k].name);
                label_value(f, M.model[i].name);
                fputs("\"} ", f);
            }
            const uint64_t v = load(&M.model[i].count[fam[k].count]);
            if (fam[k].prec)
                fprintf(f, "%.*g\n", fam[k].prec, (double)v * fam[k].scale);
            else
                fprintf(f, "%llu\n", (unsigned long long)v);
        }
    }
}

/* Each model's engine and its forwards (one series per model, since each
 * model has its own engine and may have its own precision), then the model
 * itself and the batches it ran. */
static void render_models(FILE *f) {
    if (!M.nmodels)
        return;
    header(f, "attnserve_engine_info", "gauge",
           "Each model's engine running its encoder and its precision (always 1).");
    for (int i = 0; i < M.nmodels; i++) {
        engine_labels(f, "attnserve_engine_info", i, "precision", M.model[i].precision);
        fputs("1\n", f);
    }
    header(
        f, "attnserve_engine_attention_info", "gauge",
        "The attention kernel a model's engine runs on its device in place of the attention "
        "backend (a GPU engine's flash, flash2, cudnn or fp32; always 1); no series for an engine "
        "that runs the backend.");
    for (int i = 0; i < M.nmodels; i++) {
        if (!M.model[i].attention)
            continue;
        engine_labels(f, "attnserve_engine_attention_info", i, "kernel", M.model[i].attention);
        fputs("1\n", f);
    }
    render_model_families(f, engine_families, NBOUNDS(engine_families));
    header(f, "attnserve_model_info", "gauge",
           "Each served model: its task, engine and precision (always 1).");
    for (int i = 0; i < M.nmodels; i++) {
        fputs("attnserve_model_info{model=\"", f);
        label_value(f, M.model[i].name);
        fprintf(f, "\",task=\"%s\",engine=\"%s\",precision=\"%s\"} 1\n", M.model[i].task,
                M.model[i].engine, M.model[i].precision);
    }
    render_model_families(f, batch_families, NBOUNDS(batch_families));
}

char *metrics_render(size_t *len) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        return NULL;
    render_requests(f);
    render_scheduler(f);
    render_kernels(f);
    render_models(f);
    render_safety(f);
    render_verify(f);
    render_process(f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len = n;
    return text;
}
