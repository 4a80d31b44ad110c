/* membudget.c — the request-memory budget: an atomic counter with a limit,
 * and an allocator that charges it from a per-thread scope. */
#include "server/work/membudget.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/tokenizer.h"
#include "server/api/errors.h"

/* ---- the budget --------------------------------------------------------------------- */

void membudget_init(membudget *b, size_t limit) {
    b->limit = limit;
    atomic_init(&b->used, 0);
    atomic_init(&b->peak, 0);
    atomic_init(&b->refusals, 0);
}

static void note_peak(membudget *b, size_t now) {
    size_t peak = atomic_load_explicit(&b->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &b->peak, &peak, now, memory_order_relaxed, memory_order_relaxed))
        ;
}

bool membudget_reserve(membudget *b, size_t n) {
    size_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
    do {
        /* Written so that no sum can wrap: n may be anything a client asks. */
        if (n > b->limit || used > b->limit - n) {
            atomic_fetch_add_explicit(&b->refusals, 1, memory_order_relaxed);
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &used, used + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    note_peak(b, used + n);
    return true;
}

void membudget_release(membudget *b, size_t n) {
    atomic_fetch_sub_explicit(&b->used, n, memory_order_relaxed);
}

size_t membudget_used(const membudget *b) {
    return atomic_load_explicit(&b->used, memory_order_relaxed);
}

size_t membudget_peak(const membudget *b) {
    return atomic_load_explicit(&b->peak, memory_order_relaxed);
}

uint64_t membudget_refusals(const membudget *b) {
    return atomic_load_explicit(&b->refusals, memory_order_relaxed);
}

/* ---- scopes ------------------------------------------------------------------------- */

static membudget *installed;
static _Atomic uint64_t next_scope = 1;

/* This thread's scope: its id (0: none), whether it charges now, what the
 * request holds (the body it came with plus its live blocks) and what was
 * refused. */
static _Thread_local uint64_t tl_scope;
static _Thread_local bool tl_active;
static _Thread_local size_t tl_held;
static _Thread_local int tl_refused;

void membudget_install(membudget *b) {
    installed = b;
    json_set_alloc_funcs(membudget_malloc, membudget_free);
    tok_set_alloc_funcs(membudget_realloc, membudget_free);
}

membudget *membudget_installed(void) {
    return installed;
}

void membudget_enter(size_t held) {
    tl_scope = atomic_fetch_add_explicit(&next_scope, 1, memory_order_relaxed);
    tl_active = installed != NULL;
    tl_held = held;
    tl_refused = 0;
}

void membudget_leave(void) {
    tl_scope = 0;
    tl_active = false;
    tl_held = 0;
    tl_refused = 0;
}

int membudget_suspend(void) {
    int token = tl_active;
    tl_active = false;
    return token;
}

void membudget_resume(int token) {
    tl_active = token != 0;
}

int membudget_refused(void) {
    return tl_refused;
}

int membudget_error(void) {
    return tl_refused == 0 ? 0 : tl_refused == 1 ? SRV_EMEMORY : SRV_ETOOLARGE;
}

const char *membudget_message(void) {
    return tl_refused == 2 ? "the request needs more memory than max_request_memory_bytes allows"
                           : "the request memory budget (max_request_memory_bytes) is held by "
                             "other requests; retry later";
}

/* ---- the allocator ------------------------------------------------------------------ */

/* 16 bytes, so the block after it keeps malloc's alignment. */
typedef struct block_header {
    size_t size;    /* as asked */
    uint64_t scope; /* the scope charged, or 0: made outside any */
} block_header;

_Static_assert(sizeof(block_header) == 16, "the header must keep 16-byte alignment");

size_t membudget_cost(size_t n) {
    if (n >= 128 * 1024 - 16)
        return (n + 16 + 4095) & ~(size_t)4095;
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

static size_t cost_of(size_t n) {
    return membudget_cost(n + sizeof(block_header));
}

void membudget_note_held(size_t n) {
    if (tl_active)
        tl_held += n;
}

bool membudget_charge(size_t n) {
    if (!tl_active)
        return true;
    if (!membudget_reserve(installed, n)) {
        /* Busy or, when this request's own bytes could never fit, too big. */
        int why = tl_held > installed->limit || n > installed->limit - tl_held ? 2 : 1;
        tl_refused = why > tl_refused ? why : tl_refused;
        return false;
    }
    tl_held += n;
    return true;
}

bool membudget_charging(void) {
    return tl_active;
}

void membudget_uncharge(size_t n) {
    if (installed && n)
        membudget_release(installed, n);
}

void *membudget_malloc(size_t n) {
    if (n > SIZE_MAX / 2)
        return NULL;
    const size_t charge = tl_active ? cost_of(n) : 0;
    if (!membudget_charge(charge))
        return NULL;
    block_header *h = malloc(sizeof *h + n);
    if (!h) {
        if (charge) {
            membudget_release(installed, charge);
            tl_held -= charge;
        }
        return NULL;
    }
    h->size = n;
    h->scope = charge ? tl_scope : 0;
    return h + 1;
}

void *membudget_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / 2 / size)
        return NULL;
    void *p = membudget_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void membudget_free(void *p) {
    if (!p)
        return;
    block_header *h = (block_header *)p - 1;
    if (h->scope) {
        const size_t charged = cost_of(h->size);
        membudget_release(installed, charged);
        if (h->scope == tl_scope)
            tl_held -= charged;
    }
    free(h);
}

/* A new block and a copy: the old one is charged until the copy is made, as
 * it is resident until then. */
void *membudget_realloc(void *p, size_t n) {
    if (!p)
        return membudget_malloc(n);
    block_header *h = (block_header *)p - 1;
    void *q = membudget_malloc(n);
    if (!q)
        return NULL;
    size_t old = h->size;
    memcpy(q, p, old < n ? old : n);
    membudget_free(p);
    return q;
}

/* ---- JSON parse trees ---------------------------------------------------------------- */

/* What jansson 2.14 allocates for each token, as charged (header and glibc's
 * chunk included), from its structs (jansson_private.h, hashtable.h):
 *   number          json_integer_t/json_real_t, 24 B: 48; its slot in the
 *                   parent's table, which doubles (capacity < 2 x entries)
 *                   and briefly coexists with the old one: 24           -> 80
 *   true/false/null shared singletons: only the slot                     -> 32
 *   string of len   json_string_t 32 B: 64; the text len + 3: len + 42; the
 *                   slot 24                                    -> 200 + len
 *                   As a key: the pair (56 B + len + 1): len + 96, buckets
 *                   (16 B, doubling, old and new) 48, the lexer's copy freed
 *                   after: len + 42                            -> 200 + 2 len
 *   array, object   json_array_t 40 B and its first table (8 slots): 160;
 *                   json_object_t 72 B and its first 8 buckets: 256; a slot -> 320
 * Blocks of 128 KiB and more round to pages: within the len of a string,
 * and tables that large hold at least 16 Ki slots already counted at 24 B
 * for 8 B used. The lexer keeps the current token in a doubling buffer, the
 * old one alive while the new one is filled: 3 x (longest token + 16). */
enum { COST_NUMBER = 80, COST_LITERAL = 32, COST_STRING = 200, COST_CONTAINER = 320 };

size_t membudget_json_bound(const char *text, size_t n) {
    size_t total = 4096, longest = 0;
    for (size_t i = 0; i < n;) {
        const char c = text[i];
        size_t start = i;
        if (c == '"') {
            for (i++; i < n && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
            /* A key (a colon follows) is copied into its pair; a value's
             * text is the string itself. */
            size_t j = i;
            while (j < n &&
                   (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
                j++;
            total += COST_STRING + (j < n && text[j] == ':' ? 2 : 1) * (i - start);
        } else if (c == '[' || c == '{') {
            total += COST_CONTAINER;
            i++;
            continue;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            while (i < n && (text[i] == '-' || text[i] == '+' || text[i] == '.' || text[i] == 'e' ||
                             text[i] == 'E' || (text[i] >= '0' && text[i] <= '9')))
                i++;
            total += COST_NUMBER;
        } else if (c >= 'a' && c <= 'z') {
            while (i < n && text[i] >= 'a' && text[i] <= 'z')
                i++;
            total += COST_LITERAL;
        } else {
            i++;
            continue;
        }
        if (i - start > longest)
            longest = i - start;
    }
    return total + 3 * (longest + 16);
}

/* ---- the process's memory limit --------------------------------------------------- */

/* One limit file: its value, 0 for "max", "unlimited" or no file. */
static uint64_t limit_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char text[64] = "";
    const bool read = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!read || text[0] < '0' || text[0] > '9')
        return 0;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(text, &end, 10);
    return errno || end == text || v >= (1ull << 62) ? 0 : (uint64_t)v;
}

uint64_t membudget_cgroup_limit(const char *root, const char *proc_cgroup, char *from,
                                size_t from_len) {
    if (from && from_len)
        from[0] = '\0';
    /* The cgroup's path and the hierarchy it is in: v1's when a v1
     * hierarchy holds the memory controller (a controller is in one
     * hierarchy only; hybrid hosts list a "0::" line beside it), else v2's. */
    char v2[1024] = "", v1[1024] = "";
    FILE *f = fopen(proc_cgroup, "r");
    if (f) {
        char line[1200];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = '\0';
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2 || c2[1] != '/' || strlen(c2 + 1) >= sizeof v2)
                continue;
            *c1 = *c2 = '\0'; /* line: the hierarchy's id; c1 + 1: its controllers */
            if (strcmp(line, "0") == 0 && c1[1] == '\0')
                strcpy(v2, c2 + 1);
            else
                for (char *save, *ctl = strtok_r(c1 + 1, ",", &save); ctl;
                     ctl = strtok_r(NULL, ",", &save))
                    if (strcmp(ctl, "memory") == 0)
                        strcpy(v1, c2 + 1);
        }
        fclose(f);
    }
    const bool is_v2 = !v1[0];
    const char *base = is_v2 ? "" : "/memory";
    const char *file = is_v2 ? "memory.max" : "memory.limit_in_bytes";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", is_v2 ? (v2[0] ? v2 : "/") : v1);
    uint64_t best = 0;
    for (;;) {
        char path[2300];
        const int n = snprintf(path, sizeof path, "%s%s%s/%s", root, base,
                               strcmp(dir, "/") == 0 ? "" : dir, file);
        if (n > 0 && (size_t)n < sizeof path) {
            const uint64_t v = limit_file(path);
            if (v && (!best || v < best)) {
                best = v;
                if (from && from_len)
                    snprintf(from, from_len, "%s", path);
            }
        }
        if (strcmp(dir, "/") == 0 || !dir[0])
            break;
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
    }
    return best;
}
