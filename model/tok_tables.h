/* tok_tables.h — Unicode classes for the tokenizer pipeline
 * (scripts/gen_tok_tables.py): Grapheme_Cluster_Break of the code points
 * that can join a short extended grapheme cluster, and letters and numbers. */
#ifndef ATTN_TOK_TABLES_H
#define ATTN_TOK_TABLES_H

#include <stddef.h>
#include <stdint.h>

enum {
    GCB_OTHER = 0,
    GCB_CR,
    GCB_LF,
    GCB_CONTROL,
    GCB_EXTEND,
    GCB_ZWJ,
    GCB_SPACING_MARK,
    GCB_PREPEND,
};

enum { LN_OTHER = 0, LN_LETTER, LN_NUMBER };

typedef struct tok_range {
    uint32_t lo, hi, cls;
} tok_range;

extern const tok_range gcb_ranges[];
extern const size_t gcb_ranges_n;
extern const tok_range ln_ranges[];
extern const size_t ln_ranges_n;

/* The class of cp in sorted, disjoint ranges; 0 outside them. */
static inline int tok_range_class(const tok_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return (int)r[mid].cls;
    }
    return 0;
}

static inline int gcb_class(uint32_t cp) {
    return tok_range_class(gcb_ranges, gcb_ranges_n, cp);
}

/* LN_LETTER (\p{L}), LN_NUMBER (\p{N}) or LN_OTHER. */
static inline int ln_class(uint32_t cp) {
    return tok_range_class(ln_ranges, ln_ranges_n, cp);
}

#endif
