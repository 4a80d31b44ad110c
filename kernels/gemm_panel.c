/* gemm_panel.c — the split and loops around a packed kernel's tile (see
 * gemm_panel.h).
 *
 * Split over the pool: a grid of row blocks by panel blocks. Tall batches
 * split by rows alone, so each task owns whole rows and runs a LayerNorm
 * epilogue on each chunk while it is in cache, into up to a few blocks per
 * worker where the rows allow, for the same reason as the panels below.
 * Short ones split the panels, so every core works and each streams only
 * its share of the weights, into a few tasks per worker: a worker that
 * comes late to the loop or loses its core leaves its panels to the others
 * instead of holding the loop; when there are fewer panels than workers
 * (N = 384 is six panels) the rows are split as well, so a short batch
 * still reaches every core it can use. Any split by panels leaves the
 * LayerNorm to a second pass over whole rows.
 *
 * Prefetch. A forward reads each layer's weights once per batch, from L3
 * (a MiniLM's are 42 MB; L2 holds a few of its panels), and the first tile
 * on a panel consumes it faster than L3 delivers to one core: 256 bytes
 * per 24 FMAs, about 58 GB/s at the fp32 tile's rate. So while a task's
 * tiles run on one panel, they hint the next panel it will read towards
 * L2, spread over those tiles so the fetch overlaps their compute. Measured
 * on an Emerald Rapids VM, fp32, the 24 GEMMs of a MiniLM forward on 6
 * layers' weights in turn, hints on and off alternating in one process
 * (median ratio of 41 pairs): 2 threads +19 % at 64 rows, +11-13 % at 128
 * to 384, +7 % at 1024; +5 % and +9 % at 12 and 32 rows, which split the
 * panels into short tasks whose first panel no hint reaches; one thread
 * +18 % at 64 rows. */
#include "gemm_panel.h"

#include <limits.h>

/* Rows per worker from which a batch splits by rows alone. */
enum { TALL_ROWS = 32 };

/* Tasks per worker of a short batch split by panels (fewer where there
 * are fewer panels): a 12-row forward 20 ms after the last took 5.0 ms with 4 against
 * 5.3 with 1 (bench_latency --gap-us 20000), the same back to back. Also
 * the most row blocks per worker of a tall batch. */
enum { SHORT_TASKS = 4 };

/* Fewest rows of a row block beyond one per worker. Every row block reads
 * all the weights, so a block must be tall enough to reuse each panel many
 * times while it is in L2: one thread running a 256-row GEMM as 64-row
 * blocks took the same time as in 128-row ones (within 1 %, K = 384 and
 * 1536), in 32-row ones 5-11 % longer. */
enum { TALL_TASK_ROWS = 64 };

static int ceil_div(int a, int b) {
    return (a + b - 1) / b;
}

int gemm_row_blocks(int M, int nthreads) {
    const int nt = nthreads > 1 ? nthreads : 1;
    int blocks = M / TALL_TASK_ROWS;
    if (blocks > nt * SHORT_TASKS)
        blocks = nt * SHORT_TASKS;
    if (blocks < nt)
        blocks = M < nt ? M : nt;
    return blocks > 1 ? blocks : 1;
}

void gemm_panel_grid(int M, int npanels, int nthreads, int *row_blocks, int *panel_blocks) {
    const int nt = nthreads > 1 ? nthreads : 1;
    if ((long)M >= (long)TALL_ROWS * nt) {
        *row_blocks = gemm_row_blocks(M, nt), *panel_blocks = 1;
        return;
    }
    if (npanels >= nt) {
        *row_blocks = 1;
        *panel_blocks = npanels < nt * SHORT_TASKS ? npanels : nt * SHORT_TASKS;
        return;
    }
    /* The grid whose largest task has the fewest rows × panels; on a tie the
     * one with more panel blocks, in which fewer tasks read each panel. */
    int best = INT_MAX;
    *row_blocks = 1, *panel_blocks = 1;
    for (int p = npanels; p >= 1; p--) {
        const int r = nt / p < M ? nt / p : M;
        const int cost = ceil_div(npanels, p) * ceil_div(M, r);
        if (cost < best) {
            best = cost;
            *row_blocks = r, *panel_blocks = p;
        }
    }
}

size_t gemm_panel_scratch_bytes(const gemm_panel_kernel *k, int nthreads) {
    return k->scratch_per_worker * (size_t)(nthreads > 0 ? nthreads : 1);
}

typedef struct run_ctx {
    const gemm_panel_kernel *k;
    const gemm_epilogue *epi;
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
    int M;
    int row_blocks, panel_blocks;
    int fold; /* the residual is added at the tile's store */
    char *scratch;
} run_ctx;

static void run_task(void *arg, size_t task, int worker) {
    const run_ctx *c = arg;
    const gemm_panel_kernel *k = c->k;
    const gemm_epilogue *epi = c->epi;
    int r0, r1, p0, p1;
    gemm_split(c->M, (size_t)c->row_blocks, task / (size_t)c->panel_blocks, &r0, &r1);
    gemm_split(k->npanels, (size_t)c->panel_blocks, task % (size_t)c->panel_blocks, &p0, &p1);
    void *buf = c->scratch ? c->scratch + k->scratch_per_worker * (size_t)worker : NULL;
    gemm_panel_tile t = {.ldy = c->ldy, .ldr = epi ? epi->ld_residual : 0, .depth = k->depth};
    const char *panels = k->panels;
    const long lines = (long)(k->panel_bytes / GEMM_PANEL_LINE);
    for (int rc = r0; rc < r1; rc += k->chunk) {
        const int rows = r1 - rc < k->chunk ? r1 - rc : k->chunk;
        size_t lda;
        const char *a = k->prepare(k, c->x + (size_t)rc * c->ldx, c->ldx, rows, buf, &lda);
        t.lda = lda;
        /* Each tile on a panel hints an equal share of the next one, at
         * most a line a step: with few tiles, only the first part of it. */
        const long tiles = (rows + k->mr - 1) / k->mr;
        const long even = (lines + tiles - 1) / tiles;
        const long share = even < k->depth ? even : k->depth;
        for (int p = p0; p < p1; p++) {
            const int n0 = p * k->nr;
            t.b = panels + (size_t)p * k->panel_bytes;
            /* The next panel of this chunk, else the first of the next one
             * (the sweep since may have pushed it out of L2), unless that
             * is this one. */
            const int next = p + 1 < p1 ? p + 1 : rc + rows < r1 && p0 != p ? p0 : -1;
            t.bias = k->bias + n0;
            t.cols = k->N - n0 < k->nr ? k->N - n0 : k->nr;
            for (int i = 0; i < rows; i += k->mr) {
                const int r = rc + i;
                t.mr = rows - i < k->mr ? rows - i : k->mr;
                t.a = a + (size_t)i * lda;
                const long first = (long)(i / k->mr) * share;
                const long left = next < 0 || first >= lines ? 0 : lines - first;
                t.pf =
                    left ? panels + (size_t)next * k->panel_bytes + (size_t)first * GEMM_PANEL_LINE
                         : NULL;
                t.pf_lines = (int)(left < share ? left : share);
                t.y = c->y + (size_t)r * c->ldy + n0;
                t.res = c->fold ? epi->residual + (size_t)r * epi->ld_residual + n0 : NULL;
                k->tile(&t);
                gemm_epilogue_block(epi, c->y, c->ldy, r, r + t.mr, n0, n0 + t.cols, c->fold);
            }
        }
        if (c->panel_blocks == 1)
            gemm_epilogue_norm(epi, c->y, c->ldy, rc, rc + rows, k->N);
    }
}

void gemm_panel_run(const gemm_panel_kernel *k, const attn_parallel *par, const float *x,
                    size_t ldx, float *y, size_t ldy, int M, const gemm_epilogue *epi,
                    void *scratch) {
    if (M < 1)
        return;
    run_ctx c = {.k = k, .epi = epi, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .M = M};
    c.scratch = scratch;
    c.fold = epi && epi->residual && epi->act == GEMM_ACT_NONE;
    gemm_panel_grid(M, k->npanels, par->nthreads, &c.row_blocks, &c.panel_blocks);
    par->parallel_for(par->impl, (size_t)c.row_blocks * (size_t)c.panel_blocks, run_task, &c);
    if (c.panel_blocks > 1)
        gemm_epilogue_norm_split(epi, par, y, ldy, M, k->N);
}
