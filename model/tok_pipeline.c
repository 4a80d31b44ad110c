/* tok_pipeline.c — the tokenizer.json pipeline for SentencePiece Unigram and
 * byte-level BPE models, exact to Hugging Face `tokenizers`: normalizers,
 * pre-tokenizers, the two models, post-processors and decoders as pieces
 * read from the file.
 *
 * The text is cut at added tokens ("<s>", "<mask>" typed in the text); each
 * piece between them goes through the normalizers, the pre-tokenizers and the
 * Viterbi search on its own, as in the library. Every normalized character
 * carries the input bytes it came from, with the library's rules for what an
 * inserted, replaced or removed character keeps (its NormalizedString), so
 * the offsets come out as the library's. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tok_added.h"
#include "model/tok_impl.h"
#include "model/tok_tables.h"
#include "model/unicode_norm.h"
#include "model/unicode_tables.h"

#define UG_MAX_STAGES  8     /* normalizers, pre-tokenizers or decoders in one Sequence */
#define UG_MAX_SPECIAL 8     /* post-processor tokens before or after the text */
#define UG_MAX_ADDED   65536 /* added tokens' ids run at most this far past the pieces */
#define UG_UNK_PENALTY 10.0
#define METASPACE      0x2581 /* ▁ */

/* ---- normalized text ---------------------------------------------------- */

/* One normalized character and the input bytes [start, end) it stands for. */
typedef struct nchar {
    uint32_t cp, start, end;
} nchar;

typedef struct nstr {
    nchar *c;
    size_t n, cap;
} nstr;

static int nstr_push(nstr *s, uint32_t cp, uint32_t start, uint32_t end) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        nchar *c = tok_scratch_realloc(s->c, cap * sizeof *c);
        if (!c)
            return TOK_ENOMEM;
        s->c = c;
        s->cap = cap;
    }
    s->c[s->n++] = (nchar){cp, start, end};
    return TOK_OK;
}

static bool is_ws(uint32_t cp) {
    return (uni_lookup(cp)->flags & UNI_WHITESPACE) != 0;
}

/* ---- normalizers -------------------------------------------------------- */

enum { N_PRECOMPILED, N_STRIP, N_REPLACE, N_LOWERCASE, N_NFD, N_NFKD, N_NFC, N_NFKC };
enum { PAT_LITERAL, PAT_SPACES2 };

typedef struct normalizer {
    int kind;
    bool left, right;     /* Strip */
    int pat_kind;         /* Replace */
    uint32_t *pat, *with; /* Replace: the pattern and content as code points */
    size_t pat_n, with_n;
} normalizer;

/* The SentencePiece charsmap: a darts-clone double array over the UTF-8 of
 * the rules' left sides, whose values index NUL-terminated right sides. */
typedef struct charsmap {
    uint32_t *units;
    size_t nunits;
    char *norm;
    size_t norm_len;
} charsmap;

static bool da_has_leaf(uint32_t u) {
    return (u >> 8) & 1;
}
static uint32_t da_value(uint32_t u) {
    return u & 0x7FFFFFFFu;
}
static uint32_t da_label(uint32_t u) {
    return u & 0x800000FFu;
}
static uint32_t da_offset(uint32_t u) {
    return (u >> 10) << ((u & (1u << 9)) >> 6);
}

/* The right side of the shortest rule whose left side is a prefix of key, as
 * the library takes the first of its common-prefix matches; NULL if none. */
static const char *charsmap_lookup(const charsmap *m, const uint8_t *key, size_t n) {
    if (!m->nunits)
        return NULL;
    size_t pos = da_offset(m->units[0]);
    for (size_t i = 0; i < n; i++) {
        if (key[i] == 0)
            return NULL;
        pos ^= key[i];
        if (pos >= m->nunits)
            return NULL;
        uint32_t u = m->units[pos];
        if (da_label(u) != key[i])
            return NULL;
        pos ^= da_offset(u);
        if (pos >= m->nunits)
            return NULL;
        if (da_has_leaf(u)) {
            uint32_t v = da_value(m->units[pos]);
            return v < m->norm_len ? m->norm + v : NULL;
        }
    }
    return NULL;
}

/* One change of a transformation: the library's (char, isize) pairs. */
typedef struct tchange {
    uint32_t cp;
    int32_t change;
} tchange;

typedef struct tvec {
    tchange *v;
    size_t n, cap;
} tvec;

static int tvec_push(tvec *t, uint32_t cp, int32_t change) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        tchange *v = tok_scratch_realloc(t->v, cap * sizeof *v);
        if (!v)
            return TOK_ENOMEM;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = (tchange){cp, change};
    return TOK_OK;
}

/* Applies a transformation to the whole of in: a character with change <= 0
 * takes the place (and input bytes) of the next character of in and removes
 * -change more; one with change > 0 is inserted and takes the bytes of the
 * character before it in in ({seg, seg} at the very start). */
static int apply_transform(const nstr *in, const tvec *tr, size_t removed_first, uint32_t seg,
                           nstr *out) {
    out->n = 0;
    size_t oi = removed_first;
    for (size_t i = 0; i < tr->n; i++) {
        uint32_t s = seg, e = seg;
        if (tr->v[i].change > 0) {
            if (oi >= 1 && oi - 1 < in->n)
                s = in->c[oi - 1].start, e = in->c[oi - 1].end;
        } else {
            if (oi < in->n)
                s = in->c[oi].start, e = in->c[oi].end;
            oi += 1 + (size_t)(-(int64_t)tr->v[i].change);
        }
        if (nstr_push(out, tr->v[i].cp, s, e))
            return TOK_ENOMEM;
    }
    return TOK_OK;
}

/* The library's replace(): the new characters of one rule, the last ones
 * marked inserted when there are more, or the last carrying the removal of
 * the surplus when there are fewer. */
static int push_rule(tvec *tr, size_t old_count, const char *rep) {
    size_t first = tr->n;
    const uint8_t *p = (const uint8_t *)rep;
    size_t n = strlen(rep);
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t k = tok_utf8_get(p + i, n - i, &cp);
        if (!k)
            return TOK_EINVAL;
        if (tvec_push(tr, cp, 0))
            return TOK_ENOMEM;
        i += k;
    }
    int64_t diff = (int64_t)(tr->n - first) - (int64_t)old_count;
    if (diff > 0) {
        for (size_t i = tr->n - (size_t)diff; i < tr->n; i++)
            tr->v[i].change = 1;
    } else if (diff < 0 && tr->n > 0) {
        tr->v[tr->n - 1].change += (int32_t)diff;
    }
    return TOK_OK;
}

/* Whether an extended grapheme cluster continues between a and b (UAX #29
 * rules GB3-GB9b; the others only join clusters of six bytes or more). */
static bool grapheme_joins(uint32_t a, uint32_t b) {
    int ca = gcb_class(a), cb = gcb_class(b);
    if (ca == GCB_CR && cb == GCB_LF)
        return true;
    if (ca == GCB_CR || ca == GCB_LF || ca == GCB_CONTROL || cb == GCB_CR || cb == GCB_LF ||
        cb == GCB_CONTROL)
        return false;
    if (cb == GCB_EXTEND || cb == GCB_ZWJ || cb == GCB_SPACING_MARK)
        return true;
    return ca == GCB_PREPEND;
}

/* Precompiled: a grapheme cluster under six bytes is looked up whole first
 * (and, as in the library, replaced whole by the rule of its shortest
 * matching prefix); otherwise each character is looked up on its own. */
static int norm_precompiled(const charsmap *m, const nstr *in, nstr *out, tvec *tr, uint32_t seg,
                            bool *changed) {
    tr->n = 0;
    *changed = false;
    for (size_t g = 0; g < in->n;) {
        size_t ge = g + 1;
        while (ge < in->n && grapheme_joins(in->c[ge - 1].cp, in->c[ge].cp))
            ge++;
        uint8_t buf[8];
        size_t bl = 0;
        bool whole_fits = true;
        for (size_t i = g; i < ge && whole_fits; i++) {
            char tmp[4];
            size_t k = tok_utf8_put(tmp, in->c[i].cp);
            if (bl + k >= 6)
                whole_fits = false;
            else
                memcpy(buf + bl, tmp, k), bl += k;
        }
        if (whole_fits) {
            const char *rep = charsmap_lookup(m, buf, bl);
            if (rep) {
                *changed = true;
                if (push_rule(tr, ge - g, rep))
                    return TOK_ENOMEM;
                g = ge;
                continue;
            }
        }
        for (size_t i = g; i < ge; i++) {
            char one[4];
            size_t k = tok_utf8_put(one, in->c[i].cp);
            const char *rep = charsmap_lookup(m, (const uint8_t *)one, k);
            int rc;
            if (rep) {
                *changed = true;
                rc = push_rule(tr, 1, rep);
            } else {
                rc = tvec_push(tr, in->c[i].cp, 0);
            }
            if (rc)
                return TOK_ENOMEM;
        }
        g = ge;
    }
    return *changed ? apply_transform(in, tr, 0, seg, out) : TOK_OK;
}

/* Strip: whitespace off the ends; the characters kept keep their bytes. */
static int norm_strip(const normalizer *nz, const nstr *in, nstr *out) {
    size_t a = 0, b = in->n;
    if (nz->left)
        while (a < b && is_ws(in->c[a].cp))
            a++;
    if (nz->right)
        while (b > a && is_ws(in->c[b - 1].cp))
            b--;
    out->n = 0;
    for (size_t i = a; i < b; i++)
        if (nstr_push(out, in->c[i].cp, in->c[i].start, in->c[i].end))
            return TOK_ENOMEM;
    return TOK_OK;
}

/* Length of the pattern's match at in[i], or 0. */
static size_t replace_match(const normalizer *nz, const nstr *in, size_t i) {
    if (nz->pat_kind == PAT_SPACES2) {
        size_t j = i;
        while (j < in->n && in->c[j].cp == ' ')
            j++;
        return j - i >= 2 ? j - i : 0;
    }
    if (i + nz->pat_n > in->n)
        return 0;
    for (size_t k = 0; k < nz->pat_n; k++)
        if (in->c[i + k].cp != nz->pat[k])
            return 0;
    return nz->pat_n;
}

/* Replace: each match, left to right and not overlapping, becomes the
 * content, every character of which takes the bytes of the match's last
 * character (the library removes the match, then inserts the content). */
static int norm_replace(const normalizer *nz, const nstr *in, nstr *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n;) {
        size_t m = replace_match(nz, in, i);
        if (!m) {
            if (nstr_push(out, in->c[i].cp, in->c[i].start, in->c[i].end))
                return TOK_ENOMEM;
            i++;
            continue;
        }
        const nchar *last = &in->c[i + m - 1];
        for (size_t k = 0; k < nz->with_n; k++)
            if (nstr_push(out, nz->with[k], last->start, last->end))
                return TOK_ENOMEM;
        i += m;
    }
    return TOK_OK;
}

static int norm_lowercase(const nstr *in, nstr *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const uni_record *r = uni_lookup(in->c[i].cp);
        int rc = TOK_OK;
        if (r->lower_len == 0)
            rc = nstr_push(out, in->c[i].cp, in->c[i].start, in->c[i].end);
        for (int k = 0; k < r->lower_len && !rc; k++)
            rc = nstr_push(out, uni_pool[r->lower_at + k], in->c[i].start, in->c[i].end);
        if (rc)
            return rc;
    }
    return TOK_OK;
}

/* NFD, NFKD, NFC, NFKC as the library's crate computes them, with its
 * alignment changes: each character's decomposition comes out with change 0
 * for its first character and 1 (inserted) for the others; runs of
 * non-starters are then sorted by combining class, stably, the changes
 * travelling with their characters; composition gives the composite the
 * change a + b - 1 of its two parts. The result goes through the same
 * transformation as Precompiled's, so every character keeps the input bytes
 * the library gives it. */
#define HANGUL_S 0xAC00u
#define HANGUL_L 0x1100u
#define HANGUL_V 0x1161u
#define HANGUL_T 0x11A7u
#define HANGUL_N (21u * 28u)

static int decompose_char(tvec *d, uint32_t cp, bool compat) {
    uint32_t hangul[3];
    const uint32_t *seq = &cp;
    size_t n = 1;
    if (cp >= HANGUL_S && cp < HANGUL_S + 19u * HANGUL_N) {
        uint32_t s = cp - HANGUL_S;
        hangul[0] = HANGUL_L + s / HANGUL_N;
        hangul[1] = HANGUL_V + (s % HANGUL_N) / 28u;
        hangul[2] = HANGUL_T + s % 28u;
        seq = hangul;
        n = s % 28u ? 3 : 2;
    } else if (cp >= 0x80) {
        const uni_norm_map *m =
            compat ? uni_norm_find(uni_norm_compat, uni_norm_n_compat, cp) : NULL;
        if (!m)
            m = uni_norm_find(uni_norm_canonical, uni_norm_n_canonical, cp);
        if (m)
            seq = uni_norm_pool + m->at, n = m->len;
    }
    for (size_t i = 0; i < n; i++)
        if (tvec_push(d, seq[i], i ? 1 : 0))
            return TOK_ENOMEM;
    return TOK_OK;
}

/* Stable sort of v[0, n) by combining class: insertion for the short runs
 * text has, counting (linear) for long ones, so a body of marks stays
 * linear. scratch holds n entries. */
static void sort_marks(tchange *v, size_t n, tchange *scratch) {
    if (n <= 8) {
        for (size_t i = 1; i < n; i++) {
            tchange x = v[i];
            uint8_t cx = uni_norm_ccc(x.cp);
            size_t j = i;
            while (j > 0 && uni_norm_ccc(v[j - 1].cp) > cx) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = x;
        }
        return;
    }
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++)
        count[uni_norm_ccc(v[i].cp) + 1]++;
    for (size_t c = 1; c < 257; c++)
        count[c] += count[c - 1];
    for (size_t i = 0; i < n; i++)
        scratch[count[uni_norm_ccc(v[i].cp)]++] = v[i];
    memcpy(v, scratch, n * sizeof *v);
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + 19u && b >= HANGUL_V && b < HANGUL_V + 21u)
        return HANGUL_S + (a - HANGUL_L) * HANGUL_N + (b - HANGUL_V) * 28u;
    if (a >= HANGUL_S && a < HANGUL_S + 19u * HANGUL_N && (a - HANGUL_S) % 28u == 0 &&
        b > HANGUL_T && b < HANGUL_T + 28u)
        return a + (b - HANGUL_T);
    return uni_norm_compose_pair(a, b);
}

/* The crate's recomposition: a starter (the composee) absorbs each later
 * character it composes with that no character of a class as high or
 * higher, or a starter, blocks; the others wait in held and come out after
 * it. */
static int recompose(const tvec *d, tvec *out, tvec *held) {
    out->n = held->n = 0;
    bool have = false;
    tchange k = {0, 0};
    int last = -1; /* class of the last held character, -1 none */
    for (size_t i = 0; i < d->n; i++) {
        tchange ch = d->v[i];
        int cc = uni_norm_ccc(ch.cp);
        if (!have) {
            if (cc != 0) {
                if (tvec_push(out, ch.cp, ch.change))
                    return TOK_ENOMEM;
            } else {
                k = ch, have = true;
            }
            continue;
        }
        if (last >= cc) {
            if (cc == 0) {
                if (tvec_push(out, k.cp, k.change))
                    return TOK_ENOMEM;
                for (size_t j = 0; j < held->n; j++)
                    if (tvec_push(out, held->v[j].cp, held->v[j].change))
                        return TOK_ENOMEM;
                held->n = 0;
                last = -1;
                k = ch;
                continue;
            }
            if (tvec_push(held, ch.cp, ch.change))
                return TOK_ENOMEM;
            last = cc;
            continue;
        }
        uint32_t r = compose(k.cp, ch.cp);
        if (r) {
            k = (tchange){r, k.change + ch.change - 1};
            continue;
        }
        if (last < 0 && cc == 0) {
            if (tvec_push(out, k.cp, k.change))
                return TOK_ENOMEM;
            k = ch;
            continue;
        }
        if (tvec_push(held, ch.cp, ch.change))
            return TOK_ENOMEM;
        last = cc;
    }
    if (have && tvec_push(out, k.cp, k.change))
        return TOK_ENOMEM;
    for (size_t j = 0; j < held->n; j++)
        if (tvec_push(out, held->v[j].cp, held->v[j].change))
            return TOK_ENOMEM;
    return TOK_OK;
}

/* d and held are scratch: the decomposition and, for sorting and
 * recomposition, the characters waiting. */
static int norm_unicode(int kind, const nstr *in, nstr *out, tvec *tr, tvec *d, tvec *held,
                        uint32_t seg) {
    bool compat = kind == N_NFKD || kind == N_NFKC;
    bool comp = kind == N_NFC || kind == N_NFKC;
    tvec *dec = comp ? d : tr;
    dec->n = 0;
    for (size_t i = 0; i < in->n; i++)
        if (decompose_char(dec, in->c[i].cp, compat))
            return TOK_ENOMEM;
    for (size_t i = 0; i < dec->n;) {
        if (uni_norm_ccc(dec->v[i].cp) == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < dec->n && uni_norm_ccc(dec->v[j].cp) != 0)
            j++;
        if (j - i > 8) {
            held->n = 0;
            for (size_t x = i; x < j; x++)
                if (tvec_push(held, 0, 0))
                    return TOK_ENOMEM;
        }
        sort_marks(dec->v + i, j - i, held->v);
        i = j;
    }
    if (comp && recompose(d, tr, held))
        return TOK_ENOMEM;
    return apply_transform(in, tr, 0, seg, out);
}

/* ---- pre-tokenizers ----------------------------------------------------- */

enum { P_WHITESPACE_SPLIT, P_METASPACE, P_BYTE_LEVEL, P_SPLIT };
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREVIOUS, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct pretok {
    int kind;
    uint32_t replacement; /* Metaspace */
    int prepend;
    bool split;
    bool add_prefix_space; /* ByteLevel */
    bool use_regex;        /* ByteLevel: GPT-2's pattern cuts the words first */
    pcre2_code *re;        /* Split: the pattern (a String one as a literal) */
    int behavior;          /* Split: SPLIT_* */
    bool invert;           /* Split: the pieces between matches are the matches */
} pretok;

/* Words as [from, to) ranges of one nstr. */
typedef struct words {
    nstr s;
    size_t *from, *to;
    size_t n, cap;
} words;

static int words_add(words *w, size_t from, size_t to) {
    if (from == to)
        return TOK_OK; /* the library drops empty splits */
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 32;
        size_t *f = tok_scratch_realloc(w->from, cap * sizeof *f);
        if (!f)
            return TOK_ENOMEM;
        w->from = f;
        size_t *t = tok_scratch_realloc(w->to, cap * sizeof *t);
        if (!t)
            return TOK_ENOMEM;
        w->to = t;
        w->cap = cap;
    }
    w->from[w->n] = from;
    w->to[w->n++] = to;
    return TOK_OK;
}

static int pre_whitespace_split(const words *in, words *out) {
    out->s.n = 0;
    out->n = 0;
    for (size_t w = 0; w < in->n; w++) {
        size_t start = out->s.n;
        for (size_t i = in->from[w]; i < in->to[w]; i++) {
            const nchar *c = &in->s.c[i];
            if (is_ws(c->cp)) {
                if (words_add(out, start, out->s.n))
                    return TOK_ENOMEM;
                start = out->s.n;
                continue;
            }
            if (nstr_push(&out->s, c->cp, c->start, c->end))
                return TOK_ENOMEM;
        }
        if (words_add(out, start, out->s.n))
            return TOK_ENOMEM;
    }
    return TOK_OK;
}

/* Metaspace: spaces become the replacement, which is put in front of a word
 * that lacks one (always, or only for the word at the start of the input),
 * and the word is cut before each replacement. */
static int pre_metaspace(const pretok *p, const words *in, words *out) {
    out->s.n = 0;
    out->n = 0;
    for (size_t w = 0; w < in->n; w++) {
        size_t a = in->from[w], b = in->to[w], start = out->s.n;
        uint32_t first = in->s.c[a].cp == ' ' ? p->replacement : in->s.c[a].cp;
        bool prepend =
            first != p->replacement && (p->prepend == PREPEND_ALWAYS ||
                                        (p->prepend == PREPEND_FIRST && in->s.c[a].start == 0));
        if (prepend && nstr_push(&out->s, p->replacement, in->s.c[a].start, in->s.c[a].end))
            return TOK_ENOMEM;
        for (size_t i = a; i < b; i++) {
            const nchar *c = &in->s.c[i];
            uint32_t cp = c->cp == ' ' ? p->replacement : c->cp;
            if (p->split && cp == p->replacement && out->s.n > start) {
                if (words_add(out, start, out->s.n))
                    return TOK_ENOMEM;
                start = out->s.n;
            }
            if (nstr_push(&out->s, cp, c->start, c->end))
                return TOK_ENOMEM;
        }
        if (words_add(out, start, out->s.n))
            return TOK_ENOMEM;
    }
    return TOK_OK;
}

/* ByteLevel: GPT-2's pattern cuts each word, then every byte of its UTF-8
 * becomes one printable character (byte_char below), each keeping the input
 * bytes of the character it came from. */
static uint32_t byte_char(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    /* The others, in order, from U+0100: 0x00-0x20, 0x7F-0xA0, 0xAD. */
    if (b <= 0x20)
        return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100 + 0x21 + (b - 0x7F);
    return 0x100 + 0x21 + 0x22; /* 0xAD */
}

/* The byte a byte-level character stands for, or -1. */
static int char_byte(uint32_t cp) {
    if (cp < 0x100)
        return byte_char((uint8_t)cp) == cp ? (int)cp : -1;
    if (cp >= 0x100 && cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142)
        return (int)(cp - 0x121 + 0x7F);
    return cp == 0x143 ? 0xAD : -1;
}

static bool is_letter(uint32_t cp) {
    return ln_class(cp) == LN_LETTER;
}
static bool is_number(uint32_t cp) {
    return ln_class(cp) == LN_NUMBER;
}
static bool is_other(uint32_t cp) {
    return !is_ws(cp) && !is_letter(cp) && !is_number(cp);
}

/* The length of the match of
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * at c[i] (alternatives in order, the first that matches wins); never 0. */
static size_t gpt2_match(const nchar *c, size_t n, size_t i) {
    if (c[i].cp == '\'' && i + 1 < n) {
        uint32_t a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return 3;
    }
    size_t j0 = c[i].cp == ' ' && i + 1 < n ? i + 1 : i;
    for (int k = 0; k < 3; k++) {
        size_t j = j0;
        while (j < n && (k == 0   ? is_letter(c[j].cp)
                         : k == 1 ? is_number(c[j].cp)
                                  : is_other(c[j].cp)))
            j++;
        if (j > j0)
            return j - i;
    }
    size_t j = i;
    while (j < n && is_ws(c[j].cp))
        j++;
    if (j > i) {
        if (j == n || j - i == 1)
            return j - i;
        return j - i - 1;
    }
    return 1; /* a lone space before a space: only for safety, the pattern covers all */
}

static int pre_byte_level(const pretok *p, const words *in, words *out) {
    out->s.n = 0;
    out->n = 0;
    for (size_t w = 0; w < in->n; w++) {
        const nchar *c = in->s.c + in->from[w];
        size_t n = in->to[w] - in->from[w];
        /* The prefix space takes the place of the first character's bytes. */
        nchar *tmp = NULL;
        if (p->add_prefix_space && c[0].cp != ' ') {
            tmp = tok_scratch_realloc(NULL, (n + 1) * sizeof *tmp);
            if (!tmp)
                return TOK_ENOMEM;
            tmp[0] = (nchar){' ', c[0].start, c[0].end};
            memcpy(tmp + 1, c, n * sizeof *tmp);
            c = tmp;
            n++;
        }
        for (size_t i = 0; i < n;) {
            size_t m = p->use_regex ? gpt2_match(c, n, i) : n - i, start = out->s.n;
            for (size_t k = i; k < i + m; k++) {
                char b[4];
                size_t nb = tok_utf8_put(b, c[k].cp);
                for (size_t q = 0; q < nb; q++)
                    if (nstr_push(&out->s, byte_char((uint8_t)b[q]), c[k].start, c[k].end)) {
                        tok_scratch_free(tmp);
                        return TOK_ENOMEM;
                    }
            }
            if (words_add(out, start, out->s.n)) {
                tok_scratch_free(tmp);
                return TOK_ENOMEM;
            }
            i += m;
        }
        tok_scratch_free(tmp);
    }
    return TOK_OK;
}

/* ---- decoders ----------------------------------------------------------- */

enum { D_METASPACE, D_BYTE_FALLBACK, D_FUSE, D_STRIP, D_REPLACE, D_BYTE_LEVEL };

typedef struct decoder {
    int kind;
    uint32_t replacement; /* Metaspace */
    int prepend;
    uint32_t content; /* Strip */
    size_t start, stop;
    char *pat, *with; /* Replace (a string pattern) */
} decoder;

/* Split: the library's NormalizedString::split over the matches of the
 * pattern (Oniguruma in the library, PCRE2 here, both in UTF mode with
 * Unicode classes): the word is cut into the matches and the text between
 * them, each flagged as a match (flipped by invert), and the behavior then
 * drops, keeps or merges them. Empty pieces are dropped. */
typedef struct split_piece {
    uint32_t start, end; /* bytes of the word's UTF-8 */
    bool match;
} split_piece;

typedef struct pieces {
    split_piece *v;
    size_t n, cap;
} pieces;

static int pieces_push(pieces *ps, uint32_t start, uint32_t end, bool match) {
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 32;
        split_piece *v = tok_scratch_realloc(ps->v, cap * sizeof *v);
        if (!v)
            return TOK_ENOMEM;
        ps->v = v;
        ps->cap = cap;
    }
    ps->v[ps->n++] = (split_piece){start, end, match};
    return TOK_OK;
}

/* The library's find_matches: the matches left to right with the text
 * between them, every byte covered once. As Oniguruma's iterator, an empty
 * match right where the previous match ended is skipped by one character. */
static int split_find(const pretok *p, const char *s, size_t n, pcre2_match_data *md,
                      pcre2_match_context *mc, pieces *ps) {
    ps->n = 0;
    if (n == 0)
        return pieces_push(ps, 0, 0, p->invert);
    size_t prev = 0, at = 0, last_end = SIZE_MAX;
    while (at <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        /* Past SPLIT_HEAP_LIMIT_KIB, or a frame the allocator refused: out of
         * memory, as any other refused scratch. Past the match or depth limit
         * (the pattern backtracks more on this input than PCRE2 allows): the
         * input's, not the service's. No other error is expected (the
         * subject is UTF-8 built here, the arguments are ours). */
        if (rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_NOMEMORY)
            return TOK_ENOMEM;
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT)
            return TOK_ECOMPLEX;
        if (rc < 0)
            return TOK_EINVAL;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && last_end == me) {
            size_t k = 1;
            while (at + k < n && ((uint8_t)s[at + k] & 0xC0) == 0x80)
                k++;
            at += k;
            continue;
        }
        if (prev != ms && pieces_push(ps, (uint32_t)prev, (uint32_t)ms, p->invert))
            return TOK_ENOMEM;
        if (pieces_push(ps, (uint32_t)ms, (uint32_t)me, !p->invert))
            return TOK_ENOMEM;
        prev = me;
        at = last_end = me;
    }
    if (prev != n && pieces_push(ps, (uint32_t)prev, (uint32_t)n, p->invert))
        return TOK_ENOMEM;
    return TOK_OK;
}

/* The behavior, in place: the kept pieces in order, match set on the ones
 * to remove. */
static void split_behave(int behavior, pieces *ps) {
    size_t k = 0;
    bool prev = false;
    switch (behavior) {
    case SPLIT_REMOVED:
        return;
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < ps->n; i++)
            ps->v[i].match = false;
        return;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < ps->n; i++) {
            bool m = ps->v[i].match;
            if (m == prev && k > 0)
                ps->v[k - 1].end = ps->v[i].end;
            else
                ps->v[k++] = (split_piece){ps->v[i].start, ps->v[i].end, false};
            prev = m;
        }
        break;
    case SPLIT_MERGED_PREVIOUS:
        for (size_t i = 0; i < ps->n; i++) {
            bool m = ps->v[i].match;
            if (m && !prev && k > 0)
                ps->v[k - 1].end = ps->v[i].end;
            else
                ps->v[k++] = (split_piece){ps->v[i].start, ps->v[i].end, false};
            prev = m;
        }
        break;
    default: /* SPLIT_MERGED_NEXT: the same from the end */
        k = ps->n;
        for (size_t i = ps->n; i-- > 0;) {
            bool m = ps->v[i].match;
            if (m && !prev && k < ps->n)
                ps->v[k].start = ps->v[i].start;
            else
                ps->v[--k] = (split_piece){ps->v[i].start, ps->v[i].end, false};
            prev = m;
        }
        memmove(ps->v, ps->v + k, (ps->n - k) * sizeof *ps->v);
        k = ps->n - k;
        break;
    }
    ps->n = k;
}

/* PCRE2's own memory during a match is capped (its backtracking frames), so
 * a pathological pattern fails the request instead of growing unbounded. */
#define SPLIT_HEAP_LIMIT_KIB 1024

/* PCRE2's match data and backtracking frames come from the same scratch
 * allocator as the rest of an encode. */
static void *split_malloc(size_t n, void *data) {
    (void)data;
    return tok_scratch_realloc(NULL, n);
}

static void split_free(void *p, void *data) {
    (void)data;
    tok_scratch_free(p);
}

static int pre_split(const pretok *p, const words *in, words *out) {
    out->s.n = 0;
    out->n = 0;
    size_t longest = 0;
    for (size_t w = 0; w < in->n; w++)
        if (in->to[w] - in->from[w] > longest)
            longest = in->to[w] - in->from[w];
    char *buf = tok_scratch_realloc(NULL, 4 * longest + 1);
    pcre2_general_context *gc = pcre2_general_context_create(split_malloc, split_free, NULL);
    pcre2_match_data *md = gc ? pcre2_match_data_create_from_pattern(p->re, gc) : NULL;
    pcre2_match_context *mc = gc ? pcre2_match_context_create(gc) : NULL;
    pieces ps = {0};
    int rc = buf && md && mc ? TOK_OK : TOK_ENOMEM;
    if (!rc)
        pcre2_set_heap_limit(mc, SPLIT_HEAP_LIMIT_KIB);
    for (size_t w = 0; w < in->n && !rc; w++) {
        const nchar *c = in->s.c + in->from[w];
        size_t n = in->to[w] - in->from[w], bl = 0;
        for (size_t i = 0; i < n; i++)
            bl += tok_utf8_put(buf + bl, c[i].cp);
        rc = split_find(p, buf, bl, md, mc, &ps);
        if (rc)
            break;
        split_behave(p->behavior, &ps);
        /* Byte offsets back to characters: the pieces are in order. */
        size_t ci = 0, bi = 0;
        for (size_t k = 0; k < ps.n && !rc; k++) {
            while (bi < ps.v[k].start) {
                char tmp[4];
                bi += tok_utf8_put(tmp, c[ci++].cp);
            }
            size_t start = out->s.n;
            while (bi < ps.v[k].end && !rc) {
                char tmp[4];
                bi += tok_utf8_put(tmp, c[ci].cp);
                rc = nstr_push(&out->s, c[ci].cp, c[ci].start, c[ci].end);
                ci++;
            }
            if (!rc && !ps.v[k].match)
                rc = words_add(out, start, out->s.n);
            else if (!rc)
                out->s.n = start; /* removed */
        }
    }
    tok_scratch_free(ps.v);
    tok_scratch_free(buf);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_general_context_free(gc);
    return rc;
}

/* ---- the model ---------------------------------------------------------- */

typedef struct ug_model {
    /* Pieces packed in one blob, addressed by id, with their scores. */
    char *blob;
    uint32_t *at;
    uint32_t *len;
    double *score;
    int32_t n;
    size_t max_piece;
    int32_t *slots; /* open-addressing hash of the pieces, -1 empty */
    uint32_t slot_mask;
    int32_t unk_id;
    bool byte_fallback;
    double min_score;

    /* BPE: the merges as an open-addressing hash of (left id, right id). */
    bool bpe, fuse_unk, ignore_merges;
    uint64_t *merge_keys; /* (left << 32 | right) + 1, 0 empty */
    int32_t *merge_rank, *merge_new;
    uint32_t merge_mask;

    normalizer norms[UG_MAX_STAGES];
    int n_norms;
    charsmap cmap;
    pretok pres[UG_MAX_STAGES];
    int n_pres;
    decoder decs[UG_MAX_STAGES];
    int n_decs;

    int32_t head[UG_MAX_SPECIAL], tail[UG_MAX_SPECIAL];
    int32_t n_head, n_tail;
    bool trim_offsets, trim_prefix_space; /* RobertaProcessing */

    tok_added_set added;
} ug_model;

static uint32_t fnv(const void *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 16777619u;
    return h;
}

static int32_t ug_find(const ug_model *m, const char *s, size_t n) {
    if (n == 0 || n > m->max_piece)
        return -1;
    for (uint32_t i = fnv(s, n) & m->slot_mask;; i = (i + 1) & m->slot_mask) {
        int32_t id = m->slots[i];
        if (id < 0)
            return -1;
        if (m->len[id] == n && memcmp(m->blob + m->at[id], s, n) == 0)
            return id;
    }
}

/* ---- loading ------------------------------------------------------------ */

static int load_vocab(ug_model *m, json_t *vocab, const char *file, char *err, size_t err_len) {
    size_t n = json_array_size(vocab), bytes = 0;
    if (n == 0 || n > (1u << 24)) {
        tok_set_err(err, err_len, "%s: model.vocab is empty or not an array", file);
        return TOK_ELOAD;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(vocab, i);
        json_t *piece = json_array_get(e, 0), *score = json_array_get(e, 1);
        if (!json_is_string(piece) || !json_is_number(score) || json_string_length(piece) == 0) {
            tok_set_err(err, err_len, "%s: model.vocab[%zu] is not [piece, score]", file, i);
            return TOK_ELOAD;
        }
        bytes += json_string_length(piece) + 1;
    }
    uint32_t nslots = 1;
    while (nslots < 2 * n)
        nslots <<= 1;
    m->n = (int32_t)n;
    m->blob = malloc(bytes);
    m->at = malloc(n * sizeof *m->at);
    m->len = malloc(n * sizeof *m->len);
    m->score = malloc(n * sizeof *m->score);
    m->slots = malloc(nslots * sizeof *m->slots);
    if (!m->blob || !m->at || !m->len || !m->score || !m->slots) {
        tok_set_err(err, err_len, "%s: out of memory for the vocabulary", file);
        return TOK_ENOMEM;
    }
    m->slot_mask = nslots - 1;
    memset(m->slots, 0xFF, nslots * sizeof *m->slots);
    m->min_score = INFINITY;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(vocab, i);
        const char *s = json_string_value(json_array_get(e, 0));
        size_t len = json_string_length(json_array_get(e, 0));
        m->score[i] = json_number_value(json_array_get(e, 1));
        if (m->score[i] < m->min_score)
            m->min_score = m->score[i];
        memcpy(m->blob + at, s, len);
        m->blob[at + len] = '\0';
        m->at[i] = (uint32_t)at;
        m->len[i] = (uint32_t)len;
        at += len + 1;
        if (len > m->max_piece)
            m->max_piece = len;
        /* A repeated piece keeps its last id, as the library's map does. */
        int32_t old = ug_find(m, s, len);
        if (old >= 0) {
            for (uint32_t k = 0; k <= m->slot_mask; k++)
                if (m->slots[k] == old)
                    m->slots[k] = (int32_t)i;
            continue;
        }
        uint32_t k = fnv(s, len) & m->slot_mask;
        while (m->slots[k] >= 0)
            k = (k + 1) & m->slot_mask;
        m->slots[k] = (int32_t)i;
    }
    return TOK_OK;
}

static const unsigned char b64_val[256] = {
    ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,  ['H'] = 8,
    ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
    ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
    ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
    ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

/* Standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
    uint32_t acc = 0;
    int bits = 0;
    long o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=')
            break;
        unsigned v = b64_val[(unsigned char)s[i]];
        if (!v)
            return -1;
        acc = (acc << 6) | (v - 1);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o;
}

static int load_charsmap(charsmap *cm, json_t *nz, const char *file, char *err, size_t err_len) {
    json_t *v = json_object_get(nz, "precompiled_charsmap");
    if (json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
        return TOK_OK; /* an empty charsmap changes nothing */
    if (!json_is_string(v)) {
        tok_set_err(err, err_len, "%s: Precompiled without precompiled_charsmap", file);
        return TOK_ELOAD;
    }
    size_t n = json_string_length(v);
    uint8_t *raw = malloc(n / 4 * 3 + 3);
    if (!raw) {
        tok_set_err(err, err_len, "%s: out of memory for the charsmap", file);
        return TOK_ENOMEM;
    }
    long len = b64_decode(json_string_value(v), n, raw);
    uint32_t trie_bytes = 0;
    if (len >= 4)
        trie_bytes = (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 |
                     (uint32_t)raw[3] << 24;
    if (len < 4 || trie_bytes % 4 || trie_bytes == 0 || (long)trie_bytes > len - 4) {
        free(raw);
        tok_set_err(err, err_len, "%s: precompiled_charsmap is not a SentencePiece charsmap", file);
        return TOK_ELOAD;
    }
    cm->nunits = trie_bytes / 4;
    cm->norm_len = (size_t)(len - 4 - (long)trie_bytes);
    cm->units = malloc(cm->nunits * sizeof *cm->units);
    cm->norm = malloc(cm->norm_len + 1);
    if (!cm->units || !cm->norm) {
        free(raw);
        tok_set_err(err, err_len, "%s: out of memory for the charsmap", file);
        return TOK_ENOMEM;
    }
    for (size_t i = 0; i < cm->nunits; i++) {
        const uint8_t *p = raw + 4 + 4 * i;
        cm->units[i] =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    memcpy(cm->norm, raw + 4 + trie_bytes, cm->norm_len);
    cm->norm[cm->norm_len] = '\0'; /* a right side is never read past the blob */
    free(raw);
    return TOK_OK;
}

/* A string's code points, malloc'd; the count in *n. */
static uint32_t *to_cps(const char *s, size_t len, size_t *n) {
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    if (!cps)
        return NULL;
    *n = 0;
    for (size_t i = 0; i < len;) {
        size_t k = tok_utf8_get((const uint8_t *)s + i, len - i, &cps[*n]);
        if (!k) {
            free(cps);
            return NULL;
        }
        i += k;
        (*n)++;
    }
    return cps;
}

static int load_normalizer(ug_model *m, json_t *nz, const char *file, char *err, size_t err_len) {
    if (!nz || json_is_null(nz))
        return TOK_OK;
    const char *type = json_string_value(json_object_get(nz, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *sub;
        json_array_foreach(json_object_get(nz, "normalizers"), i, sub) {
            int rc = load_normalizer(m, sub, file, err, err_len);
            if (rc)
                return rc;
        }
        return TOK_OK;
    }
    if (m->n_norms == UG_MAX_STAGES) {
        tok_set_err(err, err_len, "%s: more than %d normalizers", file, UG_MAX_STAGES);
        return TOK_ELOAD;
    }
    normalizer *n = &m->norms[m->n_norms];
    if (type && strcmp(type, "Precompiled") == 0) {
        if (m->cmap.units) {
            tok_set_err(err, err_len, "%s: two Precompiled normalizers", file);
            return TOK_ELOAD;
        }
        n->kind = N_PRECOMPILED;
        int rc = load_charsmap(&m->cmap, nz, file, err, err_len);
        if (rc)
            return rc;
    } else if (type && strcmp(type, "Strip") == 0) {
        n->kind = N_STRIP;
        n->left = json_is_true(json_object_get(nz, "strip_left"));
        n->right = json_is_true(json_object_get(nz, "strip_right"));
    } else if (type && strcmp(type, "Lowercase") == 0) {
        n->kind = N_LOWERCASE;
    } else if (type && strcmp(type, "NFD") == 0) {
        n->kind = N_NFD;
    } else if (type && strcmp(type, "NFKD") == 0) {
        n->kind = N_NFKD;
    } else if (type && strcmp(type, "NFC") == 0) {
        n->kind = N_NFC;
    } else if (type && strcmp(type, "NFKC") == 0) {
        n->kind = N_NFKC;
    } else if (type && strcmp(type, "Replace") == 0) {
        json_t *pat = json_object_get(nz, "pattern");
        json_t *lit = json_object_get(pat, "String"), *re = json_object_get(pat, "Regex");
        json_t *content = json_object_get(nz, "content");
        n->kind = N_REPLACE;
        if (json_is_string(re) && strcmp(json_string_value(re), " {2,}") == 0) {
            n->pat_kind = PAT_SPACES2;
        } else if (json_is_string(lit) && json_string_length(lit) > 0) {
            n->pat_kind = PAT_LITERAL;
            n->pat = to_cps(json_string_value(lit), json_string_length(lit), &n->pat_n);
        } else {
            tok_set_err(err, err_len, "%s: Replace normalizer pattern %s is not supported", file,
                        json_is_string(re) ? json_string_value(re) : "?");
            return TOK_ELOAD;
        }
        if (!json_is_string(content) ||
            !(n->with =
                  to_cps(json_string_value(content), json_string_length(content), &n->with_n)) ||
            (n->pat_kind == PAT_LITERAL && !n->pat)) {
            tok_set_err(err, err_len, "%s: bad Replace normalizer", file);
            return TOK_ELOAD;
        }
    } else {
        tok_set_err(err, err_len, "%s: normalizer %s is not supported", file, type ? type : "?");
        return TOK_ELOAD;
    }
    m->n_norms++;
    return TOK_OK;
}

/* prepend_scheme, or the older add_prefix_space. */
static int load_prepend(json_t *o, int *prepend) {
    const char *s = json_string_value(json_object_get(o, "prepend_scheme"));
    if (!s) {
        json_t *aps = json_object_get(o, "add_prefix_space");
        *prepend = json_is_false(aps) ? PREPEND_NEVER : PREPEND_ALWAYS;
        return 0;
    }
    if (strcmp(s, "always") == 0)
        *prepend = PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *prepend = PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *prepend = PREPEND_NEVER;
    else
        return -1;
    return 0;
}

static int load_replacement(json_t *o, uint32_t *cp) {
    json_t *r = json_object_get(o, "replacement");
    if (!r) {
        *cp = METASPACE;
        return 0;
    }
    const char *s = json_string_value(r);
    size_t n = json_string_length(r);
    if (!s || n == 0 || tok_utf8_get((const uint8_t *)s, n, cp) != n)
        return -1;
    return 0;
}

static const char *const split_behaviors[] = {"Removed", "Isolated", "MergedWithPrevious",
                                              "MergedWithNext", "Contiguous"};

/* Split: a String pattern is matched literally (the library escapes it into
 * a regex), a Regex one in UTF mode with Unicode properties for \p{..}, \w,
 * \d, \s and \b, as Oniguruma reads them. */
static int load_split(pretok *p, json_t *pt, const char *file, char *err, size_t err_len) {
    json_t *pat = json_object_get(pt, "pattern");
    json_t *lit = json_object_get(pat, "String"), *re = json_object_get(pat, "Regex");
    const char *behavior = json_string_value(json_object_get(pt, "behavior"));
    p->kind = P_SPLIT;
    p->invert = json_is_true(json_object_get(pt, "invert"));
    p->behavior = -1;
    for (int i = 0; behavior && i < (int)(sizeof split_behaviors / sizeof *split_behaviors); i++)
        if (strcmp(behavior, split_behaviors[i]) == 0)
            p->behavior = i;
    json_t *src = json_is_string(lit) ? lit : re;
    if (p->behavior < 0 || !json_is_string(src)) {
        tok_set_err(err, err_len,
                    "%s: bad Split pre-tokenizer (pattern String or Regex, behavior %s)", file,
                    behavior ? behavior : "missing");
        return TOK_ELOAD;
    }
    /* Escapes whose meaning differs between the engines: Oniguruma's \w
     * (and so \b) holds the marks and Join_Control that PCRE2's does not,
     * and its \h is a hex digit, PCRE2's a horizontal space. */
    const char *rs = json_string_value(src);
    for (size_t i = 0; src == re && i + 1 < json_string_length(src); i++) {
        if (rs[i] != '\\')
            continue;
        if (rs[i + 1] && strchr("wWbBhH", rs[i + 1])) {
            tok_set_err(
                err, err_len,
                "%s: Split pattern %s: \\%c is not supported (its Oniguruma meaning differs)", file,
                rs, rs[i + 1]);
            return TOK_ELOAD;
        }
        i++;
    }
    int code = PCRE2_ERROR_NOMEMORY;
    PCRE2_SIZE at = 0;
    uint32_t opts = PCRE2_UTF | (src == lit ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
    /* Oniguruma's ^ and $ see only LF as a line end; PCRE2's default is the
     * library build's choice (CR, CRLF, ANY... are all possible), so the
     * convention is set here rather than inherited. */
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (cc && pcre2_set_newline(cc, PCRE2_NEWLINE_LF) == 0)
        p->re = pcre2_compile((PCRE2_SPTR)json_string_value(src), json_string_length(src), opts,
                              &code, &at, cc);
    pcre2_compile_context_free(cc);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        tok_set_err(err, err_len, "%s: Split pattern %s: %s at offset %zu", file,
                    json_string_value(src), (const char *)msg, (size_t)at);
        return TOK_ELOAD;
    }
    return TOK_OK;
}

static int load_pretok(ug_model *m, json_t *pt, const char *file, char *err, size_t err_len) {
    if (!pt || json_is_null(pt))
        return TOK_OK;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *sub;
        json_array_foreach(json_object_get(pt, "pretokenizers"), i, sub) {
            int rc = load_pretok(m, sub, file, err, err_len);
            if (rc)
                return rc;
        }
        return TOK_OK;
    }
    if (m->n_pres == UG_MAX_STAGES) {
        tok_set_err(err, err_len, "%s: more than %d pre-tokenizers", file, UG_MAX_STAGES);
        return TOK_ELOAD;
    }
    pretok *p = &m->pres[m->n_pres];
    if (type && strcmp(type, "WhitespaceSplit") == 0) {
        p->kind = P_WHITESPACE_SPLIT;
    } else if (type && strcmp(type, "Metaspace") == 0) {
        p->kind = P_METASPACE;
        json_t *split = json_object_get(pt, "split");
        p->split = split ? json_is_true(split) : true;
        if (load_replacement(pt, &p->replacement) || load_prepend(pt, &p->prepend)) {
            tok_set_err(err, err_len, "%s: bad Metaspace pre-tokenizer", file);
            return TOK_ELOAD;
        }
    } else if (type && strcmp(type, "ByteLevel") == 0) {
        json_t *re = json_object_get(pt, "use_regex");
        p->kind = P_BYTE_LEVEL;
        p->use_regex = !re || json_is_true(re);
        p->add_prefix_space = json_is_true(json_object_get(pt, "add_prefix_space"));
    } else if (type && strcmp(type, "Split") == 0) {
        int rc = load_split(p, pt, file, err, err_len);
        if (rc)
            return rc;
    } else {
        tok_set_err(err, err_len, "%s: pre_tokenizer %s is not supported", file, type ? type : "?");
        return TOK_ELOAD;
    }
    m->n_pres++;
    return TOK_OK;
}

static int load_decoder(ug_model *m, json_t *d, const char *file, char *err, size_t err_len) {
    if (!d || json_is_null(d))
        return TOK_OK;
    const char *type = json_string_value(json_object_get(d, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *sub;
        json_array_foreach(json_object_get(d, "decoders"), i, sub) {
            int rc = load_decoder(m, sub, file, err, err_len);
            if (rc)
                return rc;
        }
        return TOK_OK;
    }
    if (m->n_decs == UG_MAX_STAGES) {
        tok_set_err(err, err_len, "%s: more than %d decoders", file, UG_MAX_STAGES);
        return TOK_ELOAD;
    }
    decoder *dc = &m->decs[m->n_decs];
    if (type && strcmp(type, "Metaspace") == 0) {
        dc->kind = D_METASPACE;
        if (load_replacement(d, &dc->replacement) || load_prepend(d, &dc->prepend)) {
            tok_set_err(err, err_len, "%s: bad Metaspace decoder", file);
            return TOK_ELOAD;
        }
    } else if (type && strcmp(type, "ByteLevel") == 0) {
        dc->kind = D_BYTE_LEVEL;
    } else if (type && strcmp(type, "ByteFallback") == 0) {
        dc->kind = D_BYTE_FALLBACK;
    } else if (type && strcmp(type, "Fuse") == 0) {
        dc->kind = D_FUSE;
    } else if (type && strcmp(type, "Strip") == 0) {
        json_t *c = json_object_get(d, "content");
        const char *cs = json_string_value(c);
        dc->kind = D_STRIP;
        dc->start = (size_t)json_integer_value(json_object_get(d, "start"));
        dc->stop = (size_t)json_integer_value(json_object_get(d, "stop"));
        if (!cs || tok_utf8_get((const uint8_t *)cs, json_string_length(c), &dc->content) !=
                       json_string_length(c)) {
            tok_set_err(err, err_len, "%s: bad Strip decoder", file);
            return TOK_ELOAD;
        }
    } else if (type && strcmp(type, "Replace") == 0) {
        const char *pat =
            json_string_value(json_object_get(json_object_get(d, "pattern"), "String"));
        const char *with = json_string_value(json_object_get(d, "content"));
        if (!pat || !*pat || !with) {
            tok_set_err(err, err_len, "%s: Replace decoder needs a string pattern", file);
            return TOK_ELOAD;
        }
        dc->kind = D_REPLACE;
        dc->pat = strdup(pat);
        dc->with = strdup(with);
        if (!dc->pat || !dc->with) {
            tok_set_err(err, err_len, "%s: out of memory", file);
            return TOK_ENOMEM;
        }
    } else {
        tok_set_err(err, err_len, "%s: decoder %s is not supported", file, type ? type : "?");
        return TOK_ELOAD;
    }
    m->n_decs++;
    return TOK_OK;
}

/* A post-processor's token is a piece of the model or an added token past
 * them (Qwen's <|endoftext|>, ModernBERT's [CLS]). */
static bool known_id(const ug_model *m, json_int_t id) {
    if (id >= 0 && id < m->n)
        return true;
    return id >= 0 && id <= INT32_MAX && tok_added_by_id(&m->added, (int32_t)id);
}

static int special_id(ug_model *m, json_t *pair, int32_t *dst, int32_t *n) {
    json_t *id = json_array_get(pair, 1);
    if (!json_is_integer(id) || !known_id(m, json_integer_value(id)) || *n == UG_MAX_SPECIAL)
        return -1;
    dst[(*n)++] = (int32_t)json_integer_value(id);
    return 0;
}

static int template_ids(ug_model *m, json_t *specials, const char *name, int32_t *dst, int32_t *n) {
    json_t *ids = json_object_get(json_object_get(specials, name), "ids");
    size_t i;
    json_t *v;
    if (!json_is_array(ids))
        return -1;
    json_array_foreach(ids, i, v) {
        if (!json_is_integer(v) || *n == UG_MAX_SPECIAL || !known_id(m, json_integer_value(v)))
            return -1;
        dst[(*n)++] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* Post-processors of a single sequence: the ids around it, and for
 * RobertaProcessing whether offsets are trimmed (trim_offsets). */
static int load_post(ug_model *m, json_t *pp, const char *file, char *err, size_t err_len);

/* ByteLevel as a post-processor adds no token; with trim_offsets it trims
 * the pieces' offsets as RobertaProcessing does (the library's
 * process_offsets, shared by both). */
static void load_post_byte_level(ug_model *m, json_t *pp) {
    json_t *trim = json_object_get(pp, "trim_offsets");
    json_t *aps = json_object_get(pp, "add_prefix_space");
    m->trim_offsets = trim ? json_is_true(trim) : true;
    m->trim_prefix_space = aps ? json_is_true(aps) : true;
}

/* Sequence (Llama-3's ByteLevel then TemplateProcessing): ByteLevel and one
 * post-processor that adds tokens. A trimming ByteLevel after the tokens
 * are added would trim theirs too, which is not done here: refused. */
static int load_post_sequence(ug_model *m, json_t *pp, const char *file, char *err,
                              size_t err_len) {
    size_t i;
    json_t *p;
    bool adds = false;
    json_array_foreach(json_object_get(pp, "processors"), i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (type && strcmp(type, "ByteLevel") == 0) {
            json_t *trim = json_object_get(p, "trim_offsets");
            if (adds && (!trim || json_is_true(trim))) {
                tok_set_err(err, err_len,
                            "%s: post_processor Sequence with a trimming ByteLevel after the "
                            "special tokens is not supported",
                            file);
                return TOK_ELOAD;
            }
            load_post_byte_level(m, p);
            continue;
        }
        if (adds || (type && strcmp(type, "Sequence") == 0)) {
            tok_set_err(err, err_len, "%s: post_processor Sequence with %s is not supported", file,
                        type ? type : "?");
            return TOK_ELOAD;
        }
        int rc = load_post(m, p, file, err, err_len);
        if (rc)
            return rc;
        adds = true;
    }
    return TOK_OK;
}

static int load_post(ug_model *m, json_t *pp, const char *file, char *err, size_t err_len) {
    if (!pp || json_is_null(pp))
        return TOK_OK;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) {
        load_post_byte_level(m, pp);
        return TOK_OK;
    }
    if (type && strcmp(type, "Sequence") == 0)
        return load_post_sequence(m, pp, file, err, err_len);
    if (type && (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0)) {
        if (special_id(m, json_object_get(pp, "cls"), m->head, &m->n_head) ||
            special_id(m, json_object_get(pp, "sep"), m->tail, &m->n_tail)) {
            tok_set_err(err, err_len, "%s: %s without valid cls/sep ids", file, type);
            return TOK_ELOAD;
        }
        if (strcmp(type, "RobertaProcessing") == 0) {
            json_t *trim = json_object_get(pp, "trim_offsets");
            json_t *aps = json_object_get(pp, "add_prefix_space");
            m->trim_offsets = trim ? json_is_true(trim) : true;
            m->trim_prefix_space = aps ? json_is_true(aps) : true;
        }
        return TOK_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0) {
        tok_set_err(err, err_len, "%s: post_processor %s is not supported", file,
                    type ? type : "?");
        return TOK_ELOAD;
    }
    json_t *specials = json_object_get(pp, "special_tokens");
    bool seen_seq = false;
    size_t i;
    json_t *piece;
    json_array_foreach(json_object_get(pp, "single"), i, piece) {
        if (json_object_get(piece, "Sequence")) {
            if (seen_seq) {
                tok_set_err(err, err_len, "%s: template with two sequences", file);
                return TOK_ELOAD;
            }
            seen_seq = true;
            continue;
        }
        const char *name =
            json_string_value(json_object_get(json_object_get(piece, "SpecialToken"), "id"));
        if (!name || (seen_seq ? template_ids(m, specials, name, m->tail, &m->n_tail)
                               : template_ids(m, specials, name, m->head, &m->n_head))) {
            tok_set_err(err, err_len, "%s: bad TemplateProcessing piece %s", file,
                        name ? name : "?");
            return TOK_ELOAD;
        }
    }
    if (!seen_seq) {
        tok_set_err(err, err_len, "%s: TemplateProcessing without the sequence", file);
        return TOK_ELOAD;
    }
    return TOK_OK;
}

static int load_added(ug_model *m, json_t *arr, const char *file, char *err, size_t err_len) {
    return tok_added_load(&m->added, arr, (int64_t)m->n + UG_MAX_ADDED, file, err, err_len);
}

static void ug_free(void *p) {
    ug_model *m = p;
    if (!m)
        return;
    free(m->blob);
    free(m->at);
    free(m->len);
    free(m->score);
    free(m->slots);
    free(m->merge_keys);
    free(m->merge_rank);
    free(m->merge_new);
    free(m->cmap.units);
    free(m->cmap.norm);
    for (int i = 0; i < m->n_norms; i++) {
        free(m->norms[i].pat);
        free(m->norms[i].with);
    }
    for (int i = 0; i < m->n_pres; i++)
        pcre2_code_free(m->pres[i].re);
    for (int i = 0; i < m->n_decs; i++) {
        free(m->decs[i].pat);
        free(m->decs[i].with);
    }
    tok_added_free(&m->added);
    free(m);
}

static uint64_t merge_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static uint32_t merge_slot(const ug_model *m, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & m->merge_mask;
}

/* The merge of the pair (a, b): its rank and the id it makes, or -1. */
static int32_t merge_find(const ug_model *m, int32_t a, int32_t b, int32_t *new_id) {
    uint64_t key = merge_key(a, b);
    for (uint32_t i = merge_slot(m, key);; i = (i + 1) & m->merge_mask) {
        if (m->merge_keys[i] == 0)
            return -1;
        if (m->merge_keys[i] == key) {
            *new_id = m->merge_new[i];
            return m->merge_rank[i];
        }
    }
}

/* One merge: "a b" (the older form) or ["a", "b"]. */
static int merge_parts(json_t *mg, const char **a, size_t *al, const char **b, size_t *bl) {
    if (json_is_array(mg) && json_array_size(mg) == 2 && json_is_string(json_array_get(mg, 0)) &&
        json_is_string(json_array_get(mg, 1))) {
        *a = json_string_value(json_array_get(mg, 0));
        *al = json_string_length(json_array_get(mg, 0));
        *b = json_string_value(json_array_get(mg, 1));
        *bl = json_string_length(json_array_get(mg, 1));
        return 0;
    }
    const char *s = json_string_value(mg);
    const char *sp = s ? strchr(s, ' ') : NULL;
    if (!sp || strchr(sp + 1, ' '))
        return -1;
    *a = s;
    *al = (size_t)(sp - s);
    *b = sp + 1;
    *bl = strlen(sp + 1);
    return 0;
}

/* BPE as RoBERTa and GPT-2 use it: a byte-level vocabulary with its merges,
 * no dropout, no subword prefix or suffix, no byte fallback. */
static int load_bpe(ug_model *m, json_t *model, const char *file, char *err, size_t err_len) {
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const char *bad = NULL;
    json_t *d = json_object_get(model, "dropout");
    const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *suf = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if (d && !json_is_null(d))
        bad = "dropout";
    else if ((pre && *pre) || (suf && *suf))
        bad = "continuing_subword_prefix or end_of_word_suffix";
    if (bad) {
        tok_set_err(err, err_len, "%s: BPE with %s is not supported", file, bad);
        return TOK_ELOAD;
    }
    size_t n = json_object_size(vocab);
    if (!json_is_object(vocab) || n == 0 || !json_is_array(merges)) {
        tok_set_err(err, err_len, "%s: BPE model without vocab and merges", file);
        return TOK_ELOAD;
    }
    /* The vocabulary as the [piece, score] list the loader reads, by id. */
    json_t *list = json_array();
    int rc = list ? TOK_OK : TOK_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++)
        if (json_array_append_new(list, json_null()))
            rc = TOK_ENOMEM;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (rc)
            break;
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || (size_t)id >= n ||
            !json_is_null(json_array_get(list, (size_t)id))) {
            tok_set_err(err, err_len, "%s: BPE vocabulary ids are not 0..%zu once each", file,
                        n - 1);
            rc = TOK_ELOAD;
            break;
        }
        if (json_array_set_new(list, (size_t)id, json_pack("[s,i]", key, 0)))
            rc = TOK_ENOMEM;
    }
    if (!rc)
        rc = load_vocab(m, list, file, err, err_len);
    json_decref(list);
    if (rc) {
        if (rc == TOK_ENOMEM)
            tok_set_err(err, err_len, "%s: out of memory", file);
        return rc;
    }
    size_t nm = json_array_size(merges);
    uint32_t slots = 1;
    while (slots < 2 * nm + 2)
        slots <<= 1;
    m->merge_keys = calloc(slots, sizeof *m->merge_keys);
    m->merge_rank = malloc(slots * sizeof *m->merge_rank);
    m->merge_new = malloc(slots * sizeof *m->merge_new);
    if (!m->merge_keys || !m->merge_rank || !m->merge_new) {
        tok_set_err(err, err_len, "%s: out of memory for the merges", file);
        return TOK_ENOMEM;
    }
    m->merge_mask = slots - 1;
    char *joined = NULL;
    for (size_t r = 0; r < nm; r++) {
        const char *a, *b;
        size_t al, bl;
        int32_t ia, ib, in, old;
        if (merge_parts(json_array_get(merges, r), &a, &al, &b, &bl) ||
            (ia = ug_find(m, a, al)) < 0 || (ib = ug_find(m, b, bl)) < 0) {
            free(joined);
            tok_set_err(err, err_len, "%s: merges[%zu] is not a pair of vocabulary tokens", file,
                        r);
            return TOK_ELOAD;
        }
        char *j = realloc(joined, al + bl + 1);
        if (!j) {
            free(joined);
            tok_set_err(err, err_len, "%s: out of memory", file);
            return TOK_ENOMEM;
        }
        joined = j;
        memcpy(joined, a, al);
        memcpy(joined + al, b, bl);
        if ((in = ug_find(m, joined, al + bl)) < 0) {
            free(joined);
            tok_set_err(err, err_len, "%s: merges[%zu] makes a token not in the vocabulary", file,
                        r);
            return TOK_ELOAD;
        }
        if (merge_find(m, ia, ib, &old) >= 0)
            continue; /* a repeated merge keeps its first rank */
        uint64_t k = merge_key(ia, ib);
        uint32_t at = merge_slot(m, k);
        while (m->merge_keys[at])
            at = (at + 1) & m->merge_mask;
        m->merge_keys[at] = k;
        m->merge_rank[at] = (int32_t)r;
        m->merge_new[at] = in;
    }
    free(joined);
    json_t *unk = json_object_get(model, "unk_token");
    m->unk_id =
        json_is_string(unk) ? ug_find(m, json_string_value(unk), json_string_length(unk)) : -1;
    if (json_is_string(unk) && m->unk_id < 0) {
        /* The library fails every text with a character it needs unk for. */
        tok_set_err(err, err_len, "%s: BPE unk_token %s is not in the vocabulary", file,
                    json_string_value(unk));
        return TOK_ELOAD;
    }
    m->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    m->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    m->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    m->bpe = true;
    return TOK_OK;
}

static int normalize_added(ug_model *m, const char *file, char *err, size_t err_len);

int tok_pipeline_load(void **impl, const char *file, char *err, size_t err_len) {
    *impl = NULL;
    json_error_t jerr;
    json_t *root = json_load_file(file, 0, &jerr);
    if (!root) {
        tok_set_err(err, err_len, "%s:%d: %s", file, jerr.line, jerr.text);
        return TOK_ELOAD;
    }
    ug_model *m = calloc(1, sizeof *m);
    int rc = TOK_ENOMEM;
    if (!m) {
        tok_set_err(err, err_len, "%s: out of memory", file);
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") == 0) {
        if ((rc = load_bpe(m, model, file, err, err_len)))
            goto out;
    } else {
        json_t *unk = json_object_get(model, "unk_id");
        if ((rc = load_vocab(m, json_object_get(model, "vocab"), file, err, err_len)))
            goto out;
        rc = TOK_ELOAD;
        if (!json_is_integer(unk) || json_integer_value(unk) < 0 ||
            json_integer_value(unk) >= m->n) {
            tok_set_err(err, err_len, "%s: Unigram model without a valid unk_id", file);
            goto out;
        }
        m->unk_id = (int32_t)json_integer_value(unk);
        m->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    }
    if ((rc = load_normalizer(m, json_object_get(root, "normalizer"), file, err, err_len)) ||
        (rc = load_pretok(m, json_object_get(root, "pre_tokenizer"), file, err, err_len)) ||
        (rc = load_added(m, json_object_get(root, "added_tokens"), file, err, err_len)) ||
        (rc = load_post(m, json_object_get(root, "post_processor"), file, err, err_len)) ||
        (rc = load_decoder(m, json_object_get(root, "decoder"), file, err, err_len)) ||
        (rc = normalize_added(m, file, err, err_len)))
        goto out;
    rc = TOK_OK;
out:
    json_decref(root);
    if (rc)
        ug_free(m);
    else
        *impl = m;
    return rc;
}

/* ---- encoding ----------------------------------------------------------- */

typedef struct lattice_node {
    double score;
    int32_t id;
    int32_t from; /* byte where the best piece ending here starts, -1 none */
} lattice_node;

typedef struct enc {
    const ug_model *m;
    tok_output *out;
    int32_t body_cap, pieces;
    nstr a, b;    /* normalizer double buffer */
    words w1, w2; /* pre-tokenizer double buffer */
    tvec tr;
    tvec td, th;       /* NFC/NFD/NFKC/NFKD scratch: decomposition, held marks */
    char *bytes;       /* the UTF-8 of one word */
    uint32_t *char_of; /* [byte] index of the word's character holding it */
    lattice_node *lat;
    size_t word_cap;
} enc;

/* RobertaProcessing's trim_offsets: a token's leading and trailing
 * whitespace (or the byte-level space, U+0120), counted in characters of the
 * token's text, come off its offsets; the first token keeps one leading
 * space when the processor adds a prefix space. As in the library the
 * counts are taken off byte offsets, so a multi-byte space can leave an
 * offset inside a character. */
static void trim_offsets(const enc *e, const char *s, size_t n, uint32_t *start, uint32_t *end) {
    size_t lead = 0, trail = 0, run = 0;
    bool leading = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t k = tok_utf8_get((const uint8_t *)s + i, n - i, &cp);
        if (!k)
            k = 1;
        bool space = cp == 0x120 || is_ws(cp);
        if (leading && space)
            lead++;
        else
            leading = false;
        run = space ? run + 1 : 0;
        i += k;
    }
    trail = run;
    if (lead > 0) {
        bool first = e->pieces == 0 || *start == 0;
        if (first && e->m->trim_prefix_space && lead == 1)
            lead = 0;
        *start = *start + lead < *end ? *start + (uint32_t)lead : *end;
    }
    if (trail > 0 && *end >= trail)
        *end = *end - trail > *start ? *end - (uint32_t)trail : *start;
}

/* Records one token of the text, s[0, n) its string. */
static void emit(enc *e, int32_t id, const char *s, size_t n, uint32_t start, uint32_t end) {
    if (e->m->trim_offsets)
        trim_offsets(e, s, n, &start, &end);
    if (e->pieces < e->body_cap) {
        int32_t at = e->m->n_head + e->pieces;
        e->out->ids[at] = id;
        if (e->out->offsets)
            e->out->offsets[at] = (tok_span){start, end};
        if (e->out->special)
            e->out->special[at] = 0;
    }
    if (e->pieces < INT32_MAX)
        e->pieces++;
}

static int grow_word(enc *e, size_t bytes) {
    if (bytes <= e->word_cap)
        return TOK_OK;
    size_t cap = bytes < 256 ? 256 : bytes * 2;
    char *b = tok_scratch_realloc(e->bytes, cap);
    if (b)
        e->bytes = b;
    uint32_t *c = tok_scratch_realloc(e->char_of, cap * sizeof *c);
    if (c)
        e->char_of = c;
    lattice_node *l = tok_scratch_realloc(e->lat, (cap + 1) * sizeof *l);
    if (l)
        e->lat = l;
    if (!b || !c || !l)
        return TOK_ENOMEM;
    e->word_cap = cap;
    return TOK_OK;
}

/* Emits the piece bytes[from, to) of the word: its id, or its bytes as
 * <0xNN> pieces (byte_fallback), or unk; offsets from its first and last
 * characters. */
static void emit_piece(enc *e, const nchar *chars, size_t from, size_t to, int32_t id) {
    const ug_model *m = e->m;
    uint32_t start = chars[e->char_of[from]].start, end = chars[e->char_of[to - 1]].end;
    if (id < 0)
        id = ug_find(m, e->bytes + from, to - from);
    if (id >= 0) {
        emit(e, id, e->bytes + from, to - from, start, end);
        return;
    }
    if (m->byte_fallback) {
        /* Byte pieces only when every byte has one, as in the library. */
        bool all = true;
        char name[8];
        for (size_t i = from; i < to && all; i++) {
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)e->bytes[i]);
            all = ug_find(m, name, 6) >= 0;
        }
        for (size_t i = from; i < to && all; i++) {
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)e->bytes[i]);
            emit(e, ug_find(m, name, 6), name, 6, start, end);
        }
        if (all)
            return;
    }
    /* An unknown piece keeps its own text as its token's string. */
    emit(e, m->unk_id, e->bytes + from, to - from, start, end);
}

/* Viterbi over the piece scores, as the library's optimized encode: at each
 * character, every piece starting there extends the best path; a character
 * no single-character piece covers gets unk at min_score - 10. Ties keep the
 * first candidate. Consecutive unk pieces fuse into one. */
static int encode_word(enc *e, const nchar *chars, size_t n) {
    const ug_model *m = e->m;
    size_t len = 0;
    if (grow_word(e, 4 * n + 4))
        return TOK_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t k = tok_utf8_put(e->bytes + len, chars[i].cp);
        for (size_t j = 0; j < k; j++)
            e->char_of[len + j] = (uint32_t)i;
        len += k;
    }
    lattice_node *lat = e->lat;
    for (size_t i = 0; i <= len; i++)
        lat[i] = (lattice_node){0, -1, -1};
    double unk_score = m->min_score - UG_UNK_PENALTY;
    for (size_t s = 0; s < len;) {
        size_t ch = e->char_of[s], next = s;
        while (next < len && e->char_of[next] == ch)
            next++;
        size_t mblen = next - s;
        double base = lat[s].score;
        bool single = false;
        for (size_t t = next; t <= len && t - s <= m->max_piece;) {
            int32_t id = ug_find(m, e->bytes + s, t - s);
            if (id >= 0) {
                double cand = base + m->score[id];
                if (lat[t].from < 0 || cand > lat[t].score)
                    lat[t] = (lattice_node){cand, id, (int32_t)s};
                if (t - s == mblen)
                    single = true;
            }
            if (t == len)
                break;
            size_t c = e->char_of[t];
            while (t < len && e->char_of[t] == c)
                t++;
        }
        if (!single) {
            double cand = base + unk_score;
            if (lat[next].from < 0 || cand > lat[next].score)
                lat[next] = (lattice_node){cand, m->unk_id, (int32_t)s};
        }
        s = next;
    }
    /* Walk back, recording piece starts in place of scores, then emit in
     * order. lat[i].from of the chosen path is kept; other nodes reused. */
    size_t npieces = 0;
    for (size_t at = len; at > 0; at = (size_t)lat[at].from)
        npieces++;
    size_t *ends = tok_scratch_realloc(NULL, (npieces + 1) * sizeof *ends);
    if (!ends)
        return TOK_ENOMEM;
    size_t k = npieces;
    for (size_t at = len; at > 0; at = (size_t)lat[at].from)
        ends[--k] = at;
    size_t from = 0;
    for (size_t i = 0; i < npieces;) {
        size_t to = ends[i];
        int32_t id = lat[to].id;
        if (id == m->unk_id) {
            while (i + 1 < npieces && lat[ends[i + 1]].id == m->unk_id)
                to = ends[++i];
            emit_piece(e, chars, from, to, -1);
        } else {
            emit(e, id, e->bytes + from, to - from, chars[e->char_of[from]].start,
                 chars[e->char_of[to - 1]].end);
        }
        from = to;
        i++;
    }
    tok_scratch_free(ends);
    return TOK_OK;
}

/* ---- BPE ---------------------------------------------------------------- */

typedef struct bpe_sym {
    int32_t id;
    int32_t prev, next; /* neighbours, -1 none */
    uint32_t len;       /* bytes of the word it stands for */
    bool gone;
} bpe_sym;

typedef struct bpe_merge {
    int32_t rank, pos, new_id;
} bpe_merge;

static bool merge_before(bpe_merge a, bpe_merge b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_merge *h, size_t *n, bpe_merge x) {
    size_t i = (*n)++;
    h[i] = x;
    while (i > 0 && merge_before(h[i], h[(i - 1) / 2])) {
        bpe_merge t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static bpe_merge heap_pop(bpe_merge *h, size_t *n) {
    bpe_merge top = h[0];
    h[0] = h[--(*n)];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && merge_before(h[l], h[m]))
            m = l;
        if (r < *n && merge_before(h[r], h[m]))
            m = r;
        if (m == i)
            break;
        bpe_merge t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

static void push_pair(const ug_model *m, const bpe_sym *sy, int32_t pos, bpe_merge *h, size_t *n) {
    int32_t next = sy[pos].next, new_id;
    if (next < 0)
        return;
    int32_t rank = merge_find(m, sy[pos].id, sy[next].id, &new_id);
    if (rank >= 0)
        heap_push(h, n, (bpe_merge){rank, pos, new_id});
}

/* The library's merge loop: the pair of lowest rank (leftmost on a tie) is
 * merged, then the pairs it makes with its neighbours join the queue; an
 * entry whose pair has changed since is skipped. Each merge removes a
 * symbol and adds at most two entries, so the queue holds under 3n. */
/* The byte pieces <0xNN> of the character cp into ids, when the
 * vocabulary has every one of them; else 0. */
static size_t byte_pieces(const ug_model *m, uint32_t cp, int32_t ids[4]) {
    char b[4], name[8];
    size_t k = tok_utf8_put(b, cp);
    for (size_t j = 0; j < k; j++) {
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)b[j]);
        if ((ids[j] = ug_find(m, name, 6)) < 0)
            return 0;
    }
    return k;
}

/* The word's first symbols, as the library's merge_word makes them: a
 * character's piece; else with byte_fallback its bytes' pieces (one byte
 * each); else unk, consecutive ones fused into one with fuse_unk (a pending
 * unk is added when the next character with a piece comes, so it follows
 * byte pieces met in between, as in the library); else nothing. Each
 * symbol has a length in bytes; returns the count. */
static size_t bpe_symbols(const ug_model *m, const nchar *chars, size_t n, bpe_sym *sy) {
    size_t ns = 0;
    uint32_t unk = 0; /* bytes of the pending unk, 0 none */
    for (size_t i = 0; i < n; i++) {
        char b[4];
        int32_t bytes[4];
        uint32_t k = (uint32_t)tok_utf8_put(b, chars[i].cp);
        int32_t id = ug_find(m, b, k);
        if (id >= 0) {
            if (unk)
                sy[ns++] = (bpe_sym){m->unk_id, 0, 0, unk, false};
            unk = 0;
            sy[ns++] = (bpe_sym){id, 0, 0, k, false};
            continue;
        }
        if (m->byte_fallback && byte_pieces(m, chars[i].cp, bytes)) {
            for (uint32_t j = 0; j < k; j++)
                sy[ns++] = (bpe_sym){bytes[j], 0, 0, 1, false};
            continue;
        }
        if (m->unk_id < 0)
            continue;
        if (unk && m->fuse_unk) {
            unk += k;
            continue;
        }
        if (unk)
            sy[ns++] = (bpe_sym){m->unk_id, 0, 0, unk, false};
        unk = k;
    }
    if (unk)
        sy[ns++] = (bpe_sym){m->unk_id, 0, 0, unk, false};
    for (size_t i = 0; i < ns; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    return ns;
}

/* The character of the word holding its byte want, searching on from
 * character *c, which starts at byte *cb (both advanced). */
static size_t char_holding(const nchar *chars, size_t *c, uint32_t *cb, uint32_t want) {
    char b[4];
    uint32_t cl;
    while ((cl = (uint32_t)tok_utf8_put(b, chars[*c].cp)) <= want - *cb) {
        *cb += cl;
        (*c)++;
    }
    return *c;
}

static int encode_word_bpe(enc *e, const nchar *chars, size_t n) {
    const ug_model *m = e->m;
    if (m->ignore_merges) {
        /* A word that is a piece whole is that piece, merges unread. */
        char *u = tok_scratch_realloc(NULL, 4 * n + 1);
        if (!u)
            return TOK_ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            o += tok_utf8_put(u + o, chars[i].cp);
        int32_t id = ug_find(m, u, o);
        tok_scratch_free(u);
        if (id >= 0) {
            emit(e, id, m->blob + m->at[id], m->len[id], chars[0].start, chars[n - 1].end);
            return TOK_OK;
        }
    }
    /* With byte fallback a character can be four symbols. */
    bpe_sym *sy = tok_scratch_realloc(NULL, (m->byte_fallback ? 4 : 1) * n * sizeof *sy);
    if (!sy)
        return TOK_ENOMEM;
    size_t ns = bpe_symbols(m, chars, n, sy);
    bpe_merge *h = tok_scratch_realloc(NULL, (3 * ns + 1) * sizeof *h);
    if (!h) {
        tok_scratch_free(sy);
        return TOK_ENOMEM;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        push_pair(m, sy, (int32_t)i, h, &hn);
    while (hn > 0) {
        bpe_merge top = heap_pop(h, &hn);
        bpe_sym *a = &sy[top.pos];
        if (a->gone || a->next < 0)
            continue;
        bpe_sym *b = &sy[a->next];
        int32_t now;
        if (merge_find(m, a->id, b->id, &now) < 0 || now != top.new_id)
            continue;
        a->id = top.new_id;
        a->len += b->len;
        a->next = b->next;
        b->gone = true;
        if (a->next >= 0)
            sy[a->next].prev = top.pos;
        if (a->prev >= 0)
            push_pair(m, sy, a->prev, h, &hn);
        push_pair(m, sy, top.pos, h, &hn);
    }
    /* The library places the symbols one after another by their lengths,
     * whatever was dropped or reordered before them, and maps those bytes
     * of the word back to the input: c is the character holding byte at,
     * which starts at byte cb of the word. */
    size_t c = 0;
    uint32_t at = 0, cb = 0;
    for (int32_t i = 0; i >= 0 && (size_t)i < ns; i = sy[i].next) {
        const char *tok = m->blob + m->at[sy[i].id];
        size_t first = char_holding(chars, &c, &cb, at);
        size_t last = char_holding(chars, &c, &cb, at + sy[i].len - 1);
        emit(e, sy[i].id, tok, m->len[sy[i].id], chars[first].start, chars[last].end);
        at += sy[i].len;
    }
    tok_scratch_free(sy);
    tok_scratch_free(h);
    return TOK_OK;
}

/* text[from, to) through the normalizers into e->a. */
static int normalize_segment(enc *e, const char *text, uint32_t from, uint32_t to) {
    const ug_model *m = e->m;
    e->a.n = 0;
    for (uint32_t i = from; i < to;) {
        uint32_t cp = 0;
        size_t k = tok_utf8_get((const uint8_t *)text + i, to - i, &cp);
        if (nstr_push(&e->a, cp, i, i + (uint32_t)k))
            return TOK_ENOMEM;
        i += (uint32_t)k;
    }
    for (int i = 0; i < m->n_norms; i++) {
        const normalizer *nz = &m->norms[i];
        int rc = TOK_OK;
        bool changed = true;
        switch (nz->kind) {
        case N_PRECOMPILED:
            rc = norm_precompiled(&m->cmap, &e->a, &e->b, &e->tr, from, &changed);
            break;
        case N_STRIP:
            rc = norm_strip(nz, &e->a, &e->b);
            break;
        case N_REPLACE:
            rc = norm_replace(nz, &e->a, &e->b);
            break;
        case N_LOWERCASE:
            rc = norm_lowercase(&e->a, &e->b);
            break;
        default:
            rc = norm_unicode(nz->kind, &e->a, &e->b, &e->tr, &e->td, &e->th, from);
            break;
        }
        if (rc)
            return rc;
        if (changed) {
            nstr t = e->a;
            e->a = e->b;
            e->b = t;
        }
    }
    return TOK_OK;
}

/* Pre-tokenizes and models in->s (one normalized piece) as its first word. */
static int model_piece(enc *e, words *in, words *out) {
    const ug_model *m = e->m;
    in->n = 0;
    if (words_add(in, 0, in->s.n))
        return TOK_ENOMEM;
    for (int i = 0; i < m->n_pres; i++) {
        const pretok *p = &m->pres[i];
        int rc = p->kind == P_WHITESPACE_SPLIT ? pre_whitespace_split(in, out)
                 : p->kind == P_SPLIT          ? pre_split(p, in, out)
                 : p->kind == P_METASPACE      ? pre_metaspace(p, in, out)
                                               : pre_byte_level(p, in, out);
        if (rc)
            return rc;
        words *sw = in;
        in = out;
        out = sw;
    }
    for (size_t w = 0; w < in->n; w++) {
        const nchar *c = in->s.c + in->from[w];
        size_t n = in->to[w] - in->from[w];
        int rc = m->bpe ? encode_word_bpe(e, c, n) : encode_word(e, c, n);
        if (rc)
            return rc;
    }
    return TOK_OK;
}

/* The normalized characters c[from, to) as a piece of their own. */
static int model_chars(enc *e, const nchar *c, size_t from, size_t to) {
    if (from >= to)
        return TOK_OK;
    e->w1.s.n = 0;
    for (size_t i = from; i < to; i++)
        if (nstr_push(&e->w1.s, c[i].cp, c[i].start, c[i].end))
            return TOK_ENOMEM;
    return model_piece(e, &e->w1, &e->w2);
}

/* The added tokens with normalized true, found in the normalized text e->a
 * (as UTF-8, each byte knowing its character) as the library finds them in
 * each normalized piece; the pieces between them are modelled on their own.
 * A token's offsets are those of the normalized characters it covers. With
 * none found, *none is set and nothing is modelled. */
static int split_normalized_added(enc *e, bool *none) {
    const nstr *a = &e->a;
    size_t bytes = 0;
    for (size_t i = 0; i < a->n; i++) {
        char tmp[4];
        bytes += tok_utf8_put(tmp, a->c[i].cp);
    }
    char *u = tok_scratch_realloc(NULL, bytes + 1);
    uint32_t *char_of = tok_scratch_realloc(NULL, (bytes + 1) * sizeof *char_of);
    int rc = u && char_of ? TOK_OK : TOK_ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < a->n && !rc; i++) {
        size_t k = tok_utf8_put(u + o, a->c[i].cp);
        for (size_t j = 0; j < k; j++)
            char_of[o + j] = (uint32_t)i;
        o += k;
    }
    if (!rc)
        char_of[bytes] = (uint32_t)a->n;
    tok_added_iter it = {0, 0};
    size_t at = 0;
    *none = true;
    while (!rc) {
        size_t s, en;
        const tok_added_token *t = tok_added_next(&e->m->added, true, u, bytes, &it, &s, &en);
        if (!t && *none) /* the caller models the piece whole, uncopied */
            break;
        *none = false;
        if (!t) {
            rc = model_chars(e, a->c, char_of[at], a->n);
            break;
        }
        rc = model_chars(e, a->c, char_of[at], char_of[s]);
        if (!rc && en > s)
            emit(e, t->id, u + s, en - s, a->c[char_of[s]].start, a->c[char_of[en - 1]].end);
        at = en;
    }
    tok_scratch_free(u);
    tok_scratch_free(char_of);
    return rc;
}

static void enc_free(enc *e) {
    tok_scratch_free(e->a.c);
    tok_scratch_free(e->b.c);
    tok_scratch_free(e->w1.s.c);
    tok_scratch_free(e->w1.from);
    tok_scratch_free(e->w1.to);
    tok_scratch_free(e->w2.s.c);
    tok_scratch_free(e->w2.from);
    tok_scratch_free(e->w2.to);
    tok_scratch_free(e->tr.v);
    tok_scratch_free(e->td.v);
    tok_scratch_free(e->th.v);
    tok_scratch_free(e->bytes);
    tok_scratch_free(e->char_of);
    tok_scratch_free(e->lat);
}

/* A token with normalized true is searched for as the normalizers write its
 * content, as the library builds its second automaton. */
static int normalize_added(ug_model *m, const char *file, char *err, size_t err_len) {
    int rc = TOK_OK;
    for (int i = 0; i < m->added.n && !rc; i++) {
        const tok_added_token *t = &m->added.v[i];
        if (!t->normalized)
            continue;
        enc e = {.m = m};
        rc = normalize_segment(&e, t->content, 0, (uint32_t)t->len);
        char *u = rc ? NULL : malloc(4 * e.a.n + 1);
        size_t o = 0;
        if (!rc && !u)
            rc = TOK_ENOMEM;
        for (size_t k = 0; u && k < e.a.n; k++)
            o += tok_utf8_put(u + o, e.a.c[k].cp);
        if (!rc)
            rc = tok_added_set_match(&m->added, i, u, o);
        free(u);
        enc_free(&e);
    }
    if (rc == TOK_ENOMEM)
        tok_set_err(err, err_len, "%s: out of memory normalizing the added tokens", file);
    return rc;
}

/* One piece of text between added tokens: normalize, pre-tokenize, model. */
static int encode_segment(enc *e, const char *text, uint32_t from, uint32_t to) {
    if (from >= to)
        return TOK_OK;
    int rc = normalize_segment(e, text, from, to);
    if (rc)
        return rc;
    bool none = true;
    if (e->m->added.any_normalized && ((rc = split_normalized_added(e, &none)) || !none))
        return rc;
    /* The whole normalized segment is the first word. */
    nstr t = e->w1.s;
    e->w1.s = e->a;
    e->a = t;
    return model_piece(e, &e->w1, &e->w2);
}

static int ug_encode(const void *mp, const char *text, size_t len, int truncate, tok_output *out) {
    const ug_model *m = mp;
    int32_t nspecial = m->n_head + m->n_tail;
    out->n = 0;
    out->n_full = 0;
    out->error_at = 0;
    if (out->capacity < nspecial)
        return TOK_EINVAL;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t k = tok_utf8_get((const uint8_t *)text + i, len - i, &cp);
        if (!k) {
            out->error_at = i;
            return TOK_EUTF8;
        }
        i += k;
    }
    enc e = {.m = m, .out = out, .body_cap = out->capacity - nspecial};
    int rc = TOK_OK;
    size_t at = 0;
    tok_added_iter it = {0, 0};
    while (!rc && at < len) {
        size_t s, en;
        const tok_added_token *a = tok_added_next(&m->added, false, text, len, &it, &s, &en);
        if (!a) {
            rc = encode_segment(&e, text, (uint32_t)at, (uint32_t)len);
            break;
        }
        rc = encode_segment(&e, text, (uint32_t)at, (uint32_t)s);
        if (!rc)
            /* Its string is the text matched, stripped spaces included. */
            emit(&e, a->id, text + s, en - s, (uint32_t)s, (uint32_t)en);
        at = en;
    }
    enc_free(&e);
    if (rc)
        return rc;
    int32_t kept = e.pieces < e.body_cap ? e.pieces : e.body_cap;
    out->n_full = e.pieces > INT32_MAX - nspecial ? INT32_MAX : e.pieces + nspecial;
    if (!truncate && e.pieces > e.body_cap)
        return TOK_ETOOLONG;
    for (int32_t i = 0; i < m->n_head; i++) {
        out->ids[i] = m->head[i];
        if (out->offsets)
            out->offsets[i] = (tok_span){0, 0};
        if (out->special)
            out->special[i] = 1;
    }
    for (int32_t i = 0; i < m->n_tail; i++) {
        out->ids[m->n_head + kept + i] = m->tail[i];
        if (out->offsets)
            out->offsets[m->n_head + kept + i] = (tok_span){0, 0};
        if (out->special)
            out->special[m->n_head + kept + i] = 1;
    }
    out->n = kept + nspecial;
    return TOK_OK;
}

/* ---- decoding ----------------------------------------------------------- */

/* The token strings of a decode, each its own malloc'd buffer with its
 * length (a byte piece can decode to a NUL). */
typedef struct strs {
    char **s;
    size_t *len;
    size_t n;
} strs;

static void strs_free(strs *v) {
    for (size_t i = 0; i < v->n; i++)
        free(v->s[i]);
    free(v->s);
    free(v->len);
    v->s = NULL;
    v->len = NULL;
    v->n = 0;
}

static void strs_set(strs *v, size_t i, char *r, size_t n) {
    free(v->s[i]);
    v->s[i] = r;
    v->len[i] = n;
}

/* Metaspace: the replacement becomes a space, except in the first token when
 * a prefix space was added, where the library drops it. */
static int dec_metaspace(const decoder *d, strs *v) {
    for (size_t i = 0; i < v->n; i++) {
        const char *s = v->s[i];
        size_t n = v->len[i], o = 0;
        char *r = malloc(n + 1);
        if (!r)
            return TOK_ENOMEM;
        for (size_t p = 0; p < n;) {
            uint32_t cp = 0;
            size_t k = tok_utf8_get((const uint8_t *)s + p, n - p, &cp);
            if (!k)
                k = 1, cp = (uint8_t)s[p];
            if (cp == d->replacement) {
                if (!(i == 0 && d->prepend != PREPEND_NEVER))
                    r[o++] = ' ';
            } else {
                memcpy(r + o, s + p, k);
                o += k;
            }
            p += k;
        }
        r[o] = '\0';
        strs_set(v, i, r, o);
    }
    return TOK_OK;
}

static int byte_of(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
    if (!s[3] || !s[4] || !hi || !lo)
        return -1;
    return (int)((hi - hex) * 16 + (lo - hex));
}

/* ByteFallback: a run of <0xNN> pieces becomes its bytes when they are
 * valid UTF-8, else one U+FFFD per byte. */
static int dec_byte_fallback(strs *v) {
    size_t w = 0;
    for (size_t i = 0; i < v->n;) {
        if (byte_of(v->s[i], v->len[i]) < 0) {
            v->s[w] = v->s[i];
            v->len[w++] = v->len[i++];
            continue;
        }
        size_t j = i;
        while (j < v->n && byte_of(v->s[j], v->len[j]) >= 0)
            j++;
        size_t n = j - i;
        char *r = malloc(3 * n + 1);
        if (!r)
            return TOK_ENOMEM;
        for (size_t k = 0; k < n; k++)
            r[k] = (char)byte_of(v->s[i + k], v->len[i + k]);
        bool valid = true;
        for (size_t p = 0; p < n && valid;) {
            uint32_t cp;
            size_t k = tok_utf8_get((const uint8_t *)r + p, n - p, &cp);
            valid = k != 0;
            p += k;
        }
        size_t o = n;
        if (!valid)
            for (o = 0; o < 3 * n; o += 3)
                memcpy(r + o, "\xEF\xBF\xBD", 3);
        r[o] = '\0';
        for (size_t k = i; k < j; k++)
            free(v->s[k]);
        v->s[w] = r;
        v->len[w++] = o;
        i = j;
    }
    v->n = w;
    return TOK_OK;
}

static int dec_fuse(strs *v) {
    if (v->n <= 1)
        return TOK_OK;
    size_t total = 1;
    for (size_t i = 0; i < v->n; i++)
        total += v->len[i];
    char *r = malloc(total);
    if (!r)
        return TOK_ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < v->n; i++) {
        memcpy(r + o, v->s[i], v->len[i]);
        o += v->len[i];
        free(v->s[i]);
    }
    r[o] = '\0';
    v->s[0] = r;
    v->len[0] = o;
    v->n = 1;
    return TOK_OK;
}

/* Strip: up to start leading and stop trailing characters equal to content. */
static int dec_strip(const decoder *d, strs *v) {
    for (size_t i = 0; i < v->n; i++) {
        char *s = v->s[i];
        size_t a = 0, b = v->len[i];
        for (size_t k = 0; k < d->start && a < b; k++) {
            uint32_t cp = 0;
            size_t l = tok_utf8_get((const uint8_t *)s + a, b - a, &cp);
            if (!l || cp != d->content)
                break;
            a += l;
        }
        for (size_t k = 0; k < d->stop && b > a; k++) {
            size_t q = b - 1;
            while (q > a && ((uint8_t)s[q] & 0xC0) == 0x80)
                q--;
            uint32_t cp = 0;
            if (tok_utf8_get((const uint8_t *)s + q, b - q, &cp) != b - q || cp != d->content)
                break;
            b = q;
        }
        memmove(s, s + a, b - a);
        s[b - a] = '\0';
        v->len[i] = b - a;
    }
    return TOK_OK;
}

static int dec_replace(const decoder *d, strs *v) {
    size_t pl = strlen(d->pat), wl = strlen(d->with);
    for (size_t i = 0; i < v->n; i++) {
        const char *s = v->s[i];
        size_t n = v->len[i];
        char *r = malloc(n / pl * wl + n + 1);
        if (!r)
            return TOK_ENOMEM;
        size_t o = 0;
        for (size_t p = 0; p < n;) {
            if (p + pl <= n && memcmp(s + p, d->pat, pl) == 0) {
                memcpy(r + o, d->with, wl);
                o += wl;
                p += pl;
            } else {
                r[o++] = s[p++];
            }
        }
        r[o] = '\0';
        strs_set(v, i, r, o);
    }
    return TOK_OK;
}

/* The length of the longest start of a valid UTF-8 sequence at p[0, n)
 * when it is cut or broken: what one U+FFFD stands for (Rust's
 * from_utf8_lossy, the maximal subpart). At least 1. */
static size_t invalid_run(const uint8_t *p, size_t n) {
    uint8_t b = p[0];
    size_t len = b >= 0xC2 && b <= 0xDF   ? 2
                 : b >= 0xE0 && b <= 0xEF ? 3
                 : b >= 0xF0 && b <= 0xF4 ? 4
                                          : 0;
    size_t k = 1;
    for (; len && k < len && k < n; k++) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (k == 1 && b == 0xE0)
            lo = 0xA0;
        else if (k == 1 && b == 0xED)
            hi = 0x9F;
        else if (k == 1 && b == 0xF0)
            lo = 0x90;
        else if (k == 1 && b == 0xF4)
            hi = 0x8F;
        if (p[k] < lo || p[k] > hi)
            break;
    }
    return k;
}

/* ByteLevel: all tokens to their bytes (a token with a character outside
 * the byte-level set keeps its UTF-8), then one string, invalid UTF-8
 * replaced as Rust's from_utf8_lossy does. */
static int dec_byte_level(strs *v) {
    size_t total = 0;
    for (size_t i = 0; i < v->n; i++)
        total += v->len[i];
    uint8_t *raw = malloc(total + 1);
    char *r = malloc(3 * total + 1);
    if (!raw || !r) {
        free(raw);
        free(r);
        return TOK_ENOMEM;
    }
    size_t o = 0;
    for (size_t i = 0; i < v->n; i++) {
        const char *s = v->s[i];
        size_t n = v->len[i], start = o;
        for (size_t p = 0; p < n;) {
            uint32_t cp = 0;
            size_t k = tok_utf8_get((const uint8_t *)s + p, n - p, &cp);
            int b = k ? char_byte(cp) : -1;
            if (b < 0) {
                o = start;
                memcpy(raw + o, s, n);
                o += n;
                break;
            }
            raw[o++] = (uint8_t)b;
            p += k;
        }
    }
    size_t w = 0;
    for (size_t p = 0; p < o;) {
        uint32_t cp;
        size_t k = tok_utf8_get(raw + p, o - p, &cp);
        if (k) {
            memcpy(r + w, raw + p, k);
            w += k;
            p += k;
        } else {
            memcpy(r + w, "\xEF\xBF\xBD", 3);
            w += 3;
            p += invalid_run(raw + p, o - p);
        }
    }
    r[w] = '\0';
    free(raw);
    for (size_t i = 0; i < v->n; i++)
        free(v->s[i]);
    v->s[0] = r;
    v->len[0] = w;
    v->n = 1;
    return TOK_OK;
}

static const tok_added_token *added_of(const ug_model *m, int32_t id) {
    return tok_added_by_id(&m->added, id);
}

static int ug_decode(const void *mp, const int32_t *ids, size_t n, int skip_special, char **text,
                     size_t *len) {
    const ug_model *m = mp;
    strs v = {calloc(n + 1, sizeof(char *)), calloc(n + 1, sizeof(size_t)), 0};
    int rc = v.s && v.len ? TOK_OK : TOK_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        const tok_added_token *a = added_of(m, ids[i]);
        if (!a && (ids[i] < 0 || ids[i] >= m->n)) {
            rc = TOK_EINVAL;
            break;
        }
        /* An added token decodes as it is searched for (a normalized one
         * as the normalizer wrote it); the library skips a token whose
         * string is a special token's content, whatever its id. */
        const char *s = a ? a->match : m->blob + m->at[ids[i]];
        size_t l = a ? a->match_len : m->len[ids[i]];
        if (skip_special && tok_added_is_special(&m->added, s, l))
            continue;
        if (!(v.s[v.n] = malloc(l + 1))) {
            rc = TOK_ENOMEM;
            break;
        }
        memcpy(v.s[v.n], s, l + 1);
        v.len[v.n++] = l;
    }
    for (int k = 0; k < m->n_decs && !rc; k++) {
        const decoder *d = &m->decs[k];
        switch (d->kind) {
        case D_METASPACE:
            rc = dec_metaspace(d, &v);
            break;
        case D_BYTE_FALLBACK:
            rc = dec_byte_fallback(&v);
            break;
        case D_FUSE:
            rc = dec_fuse(&v);
            break;
        case D_STRIP:
            rc = dec_strip(d, &v);
            break;
        case D_BYTE_LEVEL:
            rc = v.n ? dec_byte_level(&v) : TOK_OK;
            break;
        default:
            rc = dec_replace(d, &v);
            break;
        }
    }
    size_t total = 1;
    for (size_t i = 0; i < v.n && !rc; i++)
        total += v.len[i] + 1;
    char *r = rc ? NULL : malloc(total);
    if (!rc && !r)
        rc = TOK_ENOMEM;
    if (!rc) {
        /* Without a decoder the library joins the tokens with spaces. */
        size_t o = 0;
        for (size_t i = 0; i < v.n; i++) {
            if (i && m->n_decs == 0)
                r[o++] = ' ';
            memcpy(r + o, v.s[i], v.len[i]);
            o += v.len[i];
        }
        r[o] = '\0';
        *text = r;
        *len = o;
    }
    strs_free(&v);
    return rc;
}

/* ---- the model's slots -------------------------------------------------- */

static int32_t ug_num_special(const void *mp) {
    const ug_model *m = mp;
    return m->n_head + m->n_tail;
}
/* Added tokens may have ids past the model's pieces (a <mask> added after
 * training): the vocabulary then runs to the largest of them. */
static int32_t ug_vocab_size(const void *mp) {
    const ug_model *m = mp;
    int32_t n = m->n;
    for (int i = 0; i < m->added.n; i++)
        if (m->added.v[i].id >= n)
            n = m->added.v[i].id + 1;
    return n;
}
static const char *ug_id_to_token(const void *mp, int32_t id) {
    const ug_model *m = mp;
    if (id >= 0 && id < m->n)
        return m->blob + m->at[id];
    const tok_added_token *a = added_of(m, id);
    return a ? a->match : NULL;
}
static int32_t ug_token_to_id(const void *mp, const char *s, size_t len) {
    const ug_model *m = mp;
    int32_t id = ug_find(m, s, len);
    for (int i = 0; i < m->added.n && id < 0; i++)
        if (m->added.v[i].len == len && memcmp(m->added.v[i].content, s, len) == 0)
            id = m->added.v[i].id;
    return id;
}
static int32_t ug_unk_id(const void *mp) {
    return ((const ug_model *)mp)->unk_id;
}

const tok_ops tok_bpe_ops = {
    .name = "BPE",
    .encode = ug_encode,
    .decode = ug_decode,
    .num_special = ug_num_special,
    .vocab_size = ug_vocab_size,
    .id_to_token = ug_id_to_token,
    .token_to_id = ug_token_to_id,
    .unk_id = ug_unk_id,
    .free = ug_free,
};

const tok_ops tok_unigram_ops = {
    .name = "Unigram",
    .encode = ug_encode,
    .decode = ug_decode,
    .num_special = ug_num_special,
    .vocab_size = ug_vocab_size,
    .id_to_token = ug_id_to_token,
    .token_to_id = ug_token_to_id,
    .unk_id = ug_unk_id,
    .free = ug_free,
};
