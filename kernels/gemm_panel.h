/* gemm_panel.h — the driver of the packed GEMM kernels (fp32 and bf16 on
 * AVX-512): weights packed at load into panels of nr output columns, and a
 * tile that computes up to mr rows by one panel, bias included.
 *
 * The driver owns what every such kernel does alike: the split of rows and
 * panels over the pool, the loop of row chunks by panels around the tile,
 * the epilogue on each tile while it is in L1, the LayerNorm over whole
 * rows, and which panel a task reads next (a prefetch hint to its tiles).
 * A kernel brings its panels, how a chunk of activations is made ready for
 * its tiles (read in place, or converted into the worker's scratch) and the
 * tile itself; nothing here depends on its precision. */
#ifndef ATTN_GEMM_PANEL_H
#define ATTN_GEMM_PANEL_H

#include <stddef.h>

#include "gemm.h"
#include "parallel.h"

/* One tile: y (mr, cols) = a (mr rows) · the panel + its bias, + res when
 * not NULL (read just before the store of the same elements, so it may
 * alias y). */
typedef struct gemm_panel_tile {
    /* mr rows of prepared activations, row stride lda bytes */
    const void *a;
    size_t lda;
    const void *b;     /* the panel's packed weights */
    const float *bias; /* the panel's nr biases, zero past N */
    /* (mr, cols) at row stride ldy floats */
    float *y;
    size_t ldy;
    /* NULL, or (mr, cols) at row stride ldr floats */
    const float *res;
    size_t ldr;
    int depth;    /* the kernel's gemm_panel_kernel.depth */
    int mr, cols; /* 1..mr rows, 1..nr columns */
    /* pf_lines cache lines (GEMM_PANEL_LINE bytes) from pf, this tile's
     * share of the panel its task reads next: a kernel may touch them
     * towards L2 while it runs, a line per unit of depth (pf_lines <=
     * depth), so that as much of that panel as the sweep's tiles can
     * hint at that rate is there when its first tile starts. pf_lines is
     * 0 and pf NULL when the task reads no other panel next, or when the
     * earlier tiles of the sweep have hinted all of it. */
    const char *pf;
    int pf_lines;
} gemm_panel_tile;

/* The cache line the prefetch hints count in. */
enum { GEMM_PANEL_LINE = 64 };

/* A packed kernel as the driver sees it; its packed weights own it. */
typedef struct gemm_panel_kernel gemm_panel_kernel;
struct gemm_panel_kernel {
    int N;       /* output columns */
    int npanels; /* ceil(N / nr) */
    int nr;      /* columns per panel */
    int mr;      /* most rows of a tile */
    int chunk;   /* rows prepared at a time: they stay in L2 while the panels pass */
    int depth;   /* the reduction length in the kernel's own steps (K, or K rounded up) */
    /* npanels panels of panel_bytes each */
    const void *panels;
    size_t panel_bytes;
    const float *bias;         /* (npanels * nr), zero where absent */
    size_t scratch_per_worker; /* bytes prepare may use, per worker */
    const void *impl;          /* the kernel's own packed weights, for prepare */
    /* Rows [0, rows) of x (row stride ldx floats) ready for the tiles: in
     * buf (the worker's scratch_per_worker bytes) or x itself. Sets *lda to
     * their row stride in bytes. */
    const void *(*prepare)(const gemm_panel_kernel *k, const float *x, size_t ldx, int rows,
                           void *buf, size_t *lda);
    void (*tile)(const gemm_panel_tile *t);
};

/* The scratch gemm_panel_run needs with nthreads workers. */
size_t gemm_panel_scratch_bytes(const gemm_panel_kernel *k, int nthreads);

/* gemm_run for a packed kernel: y (M, N, row stride ldy) = epi(x · Wᵀ + b),
 * split over par. scratch holds gemm_panel_scratch_bytes(k, par->nthreads)
 * (may be NULL when that is 0). */
void gemm_panel_run(const gemm_panel_kernel *k, const attn_parallel *par, const float *x,
                    size_t ldx, float *y, size_t ldy, int M, const gemm_epilogue *epi,
                    void *scratch);

/* The row blocks a batch of M rows split by rows alone is cut into over
 * nthreads workers: one per worker (or per row, when there are fewer rows),
 * more where each still has enough rows to reuse the weights well, so that
 * a worker that comes late or loses its core leaves blocks to the others.
 * Every packed kernel's split by rows uses it. */
int gemm_row_blocks(int M, int nthreads);

/* The task grid gemm_panel_run splits M rows and npanels panels into over
 * nthreads workers: *row_blocks × *panel_blocks tasks, at most nthreads
 * when rows and panels are split together, up to 4 per worker when either
 * alone is. */
void gemm_panel_grid(int M, int npanels, int nthreads, int *row_blocks, int *panel_blocks);

#endif
