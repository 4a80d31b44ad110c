/* membudget.h — one budget for the memory requests hold.
 *
 * Every byte a request holds while it holds it — its body as it is read, the
 * JSON parse tree, the decoded job, the response being built and the
 * serialised response until libmicrohttpd has sent it — is charged to one
 * budget (max_request_memory_bytes). A charge that would pass the budget is
 * refused: that one request fails (503, Retry-After) and the others go on.
 * So the memory that scales with load is bounded by a number known at start.
 *
 * Reservations are lock-free (one compare-and-swap loop on an atomic
 * counter) and allocate nothing.
 *
 * The allocator below puts a 16-byte header before each block recording what
 * was charged, so a block is released exactly whatever thread frees it. It
 * charges the budget of the calling thread's scope (membudget_enter), and
 * nothing outside a scope; jansson is pointed at it (membudget_install), so
 * every JSON value and every json_dumps() text a handler makes is counted,
 * and so is the tokenizer's scratch (tok_set_alloc_funcs), whose size grows
 * with the input it normalizes.
 * Consequence: once installed, text from json_dumps() must be freed with
 * membudget_free(), never free(). */
#ifndef ATTN_MEMBUDGET_H
#define ATTN_MEMBUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct membudget {
    size_t limit;
    _Atomic size_t used;
    _Atomic size_t peak;       /* the most ever in use */
    _Atomic uint64_t refusals; /* charges refused */
} membudget;

/* What malloc(n) costs in glibc, at most: small chunks carry 8 bytes and
 * round up to 16 (32 at least); large ones are mmap'd whole pages (a large
 * block glibc serves from its heap instead costs less). Charges use it, so a
 * charge is what the block costs, not just what was asked. */
size_t membudget_cost(size_t n);

void membudget_init(membudget *b, size_t limit);

/* Charges n bytes; false (nothing charged, refusals counted) when that
 * would pass the limit. */
bool membudget_reserve(membudget *b, size_t n);
void membudget_release(membudget *b, size_t n);
size_t membudget_used(const membudget *b);
size_t membudget_peak(const membudget *b);
uint64_t membudget_refusals(const membudget *b);

/* ---- the charging allocator -------------------------------------------------------- */

/* Points jansson's allocation at membudget_malloc/membudget_free. Call once,
 * before any JSON value exists (blocks jansson made with plain malloc cannot
 * be freed through the header). b is the budget scopes charge. */
void membudget_install(membudget *b);
/* The budget installed, or NULL. */
membudget *membudget_installed(void);

/* Opens a scope on this thread: from now until membudget_leave, blocks made
 * by membudget_malloc (and so by jansson) are charged to the installed
 * budget, and a refusal is remembered (membudget_refused). held is what the
 * request already holds outside the allocator (its body), so that a refusal
 * can tell "busy" from "this request alone is larger than the budget". No-op
 * when nothing is installed. */
void membudget_enter(size_t held);
/* Closes this thread's scope, forgetting any refusal. Blocks stay charged
 * until freed. */
void membudget_leave(void);
/* Suspends the scope (error answers are small and must not be refused) and
 * gives back a token to resume it with. */
int membudget_suspend(void);
void membudget_resume(int token);

/* Since membudget_enter on this thread: 0 when nothing was refused, 1 when a
 * charge was refused because others hold the budget, 2 when the request's
 * own bytes alone would pass the limit. */
int membudget_refused(void);

/* The answer to a refusal in this scope: SRV_EMEMORY (503, Retry-After) when
 * others hold the budget, SRV_ETOOLARGE (413) when the request alone needs
 * more than it; 0 when nothing was refused. The message says which. */
int membudget_error(void);
const char *membudget_message(void);

/* Charges n bytes held outside the allocator (a body buffer) to this
 * thread's scope: false, with the refusal noted, when the budget cannot take
 * them; true without charging when no scope is open. membudget_uncharge
 * gives them back, from any thread. */
bool membudget_charge(size_t n);

/* Counts n bytes this request already holds, charged in an earlier scope
 * (its job, allocated before it was parked), as its own in this thread's
 * scope, so that a refusal here tells "needs more than the budget" (413)
 * from "the budget is held by others" (503). Charges nothing. */
void membudget_note_held(size_t n);
/* Whether this thread's scope charges now (entered, not suspended, and a
 * budget installed). */
bool membudget_charging(void);
void membudget_uncharge(size_t n);

/* malloc and free that charge this thread's scope (no scope: counted
 * nowhere). NULL when out of memory or refused. membudget_free(NULL) is a
 * no-op; any thread may free any block. */
void *membudget_malloc(size_t n);
void *membudget_calloc(size_t n, size_t size);
void *membudget_realloc(void *p, size_t n);
void membudget_free(void *p);

/* ---- JSON parse trees ---------------------------------------------------------------
 *
 * jansson 2.14 writes past a buffer when an allocation fails inside its lexer
 * (lex_save ignores the failure; lex_scan_string then copies to the closing
 * quote it never saved), so a parse must never see a refused allocation. It
 * is admitted whole instead: the caller charges this bound first, parses with
 * the scope suspended, and releases the bound when the tree is freed. */

/* The most jansson 2.14 allocates, through this allocator, to parse text[0..n):
 * every value's struct, string and table (doubling growth included), the
 * object keys, and the lexer's buffer. Linear in n; nesting is not checked. */
size_t membudget_json_bound(const char *text, size_t n);

/* ---- the process's memory limit ---------------------------------------------------
 *
 * The tightest memory limit of the cgroup this process runs in and of every
 * cgroup above it, as the kernel enforces the smallest of them: the cgroup's
 * path comes from proc_cgroup (/proc/self/cgroup: the v1 line whose
 * controllers include memory, else cgroup v2's "0::PATH"), its files from
 * root (/sys/fs/cgroup: v2 memory.max, v1 memory/memory.limit_in_bytes),
 * read from the process's own cgroup up to root itself, so a container that
 * mounts only its own cgroup at root still finds that one's limit. "max", a
 * missing file and v1's "unlimited" (2^63 rounded down to a page: any value
 * at or above 2^62) are no limit. Returns the limit in bytes, 0 for none;
 * from (may be NULL) gets the file the limit came from. */
uint64_t membudget_cgroup_limit(const char *root, const char *proc_cgroup, char *from,
                                size_t from_len);

#endif
