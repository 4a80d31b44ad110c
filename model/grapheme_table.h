/* grapheme_table.h — Grapheme_Cluster_Break classes of the code points that
 * can join a short extended grapheme cluster (scripts/gen_grapheme_table.py). */
#ifndef ATTN_GRAPHEME_TABLE_H
#define ATTN_GRAPHEME_TABLE_H

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

typedef struct gcb_range {
    uint32_t lo, hi, cls;
} gcb_range;

extern const gcb_range gcb_ranges[];
extern const size_t gcb_nranges;

/* The class of cp: binary search over sorted, disjoint ranges. */
static inline int gcb_class(uint32_t cp) {
    size_t lo = 0, hi = gcb_nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < gcb_ranges[mid].lo)
            hi = mid;
        else if (cp > gcb_ranges[mid].hi)
            lo = mid + 1;
        else
            return (int)gcb_ranges[mid].cls;
    }
    return GCB_OTHER;
}

#endif
