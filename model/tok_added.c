/* tok_added.c — added tokens found in text as the library's AddedVocabulary
 * finds them (find_matches in added_vocabulary.rs), shared by the WordPiece
 * tokenizer and the Unigram/BPE pipeline. */
#include "model/tok_added.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tok_impl.h"
#include "model/unicode_tables.h"

/* Gemma's tokenizer.json lists some 6,000 added tokens. */
#define TOK_ADDED_MAX (1 << 16)

/* The library's \s (the regex crate's White_Space). */
static bool is_space(uint32_t cp) {
    return (uni_lookup(cp)->flags & UNI_WHITESPACE) != 0;
}

/* single_word reads the regex crate's \w: Alphabetic, marks, decimal
 * digits, connector punctuation and the two joiners. PCRE2 knows those
 * properties; a bitmap of every code point, made once at load, keeps the
 * matching free of PCRE2 calls and allocations. PCRE2's Unicode tables
 * (14.0 in Debian 12) are older than the regex crate's: a character
 * assigned since can differ, as for the Split pre-tokenizer. */
static int make_word_bitmap(tok_added_set *s, const char *file, char *err, size_t err_len) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile(
        (PCRE2_SPTR) "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]",
        PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create(1, NULL) : NULL;
    s->word = calloc(0x110000 / 8, 1);
    int rc = TOK_OK;
    if (!re || !md || !s->word) {
        tok_set_err(err, err_len, "%s: out of memory for single_word", file);
        rc = TOK_ENOMEM;
    }
    for (uint32_t cp = 0; cp < 0x110000 && !rc; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char b[4];
        size_t k = tok_utf8_put(b, cp);
        if (pcre2_match(re, (PCRE2_SPTR)b, k, 0, 0, md, NULL) >= 0)
            s->word[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc;
}

static int by_first_byte_then_longest(const void *a, const void *b, void *arg) {
    const tok_added_token *v = arg, *x = &v[*(const int *)a], *y = &v[*(const int *)b];
    uint8_t fx = (uint8_t)x->match[0], fy = (uint8_t)y->match[0];
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->match_len != y->match_len)
        return x->match_len > y->match_len ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* The first-byte filter and the tokens grouped by first byte, longest
 * first, from every token's search form. */
static void index_tokens(tok_added_set *s) {
    memset(s->first, 0, sizeof s->first);
    memset(s->at, 0, sizeof s->at);
    int n = 0;
    for (int k = 0; k < s->n; k++) {
        /* A token the normalizer turns into nothing never matches, as in
         * the library. */
        if (!s->v[k].match_len)
            continue;
        uint8_t b = (uint8_t)s->v[k].match[0];
        s->first[b] |= s->v[k].normalized ? 2 : 1;
        s->order[n++] = k;
        s->at[b + 1]++;
    }
    for (int b = 0; b < 256; b++)
        s->at[b + 1] += s->at[b];
    if (n > 1) /* order is NULL when there are no added tokens */
        qsort_r(s->order, (size_t)n, sizeof *s->order, by_first_byte_then_longest, s->v);
}

static bool is_word(const tok_added_set *s, uint32_t cp) {
    return (s->word[cp >> 3] >> (cp & 7)) & 1;
}

static int by_id_then_index(const void *a, const void *b, void *arg) {
    const tok_added_token *v = arg;
    const int i = *(const int *)a, j = *(const int *)b;
    if (v[i].id != v[j].id)
        return v[i].id < v[j].id ? -1 : 1;
    return i - j;
}

/* Contents in byte order, a prefix before what it begins. */
static int cmp_content(const char *a, size_t alen, const char *b, size_t blen) {
    const int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen == blen ? 0 : alen < blen ? -1 : 1;
}

static int by_content(const void *a, const void *b, void *arg) {
    const tok_added_token *v = arg, *x = &v[*(const int *)a], *y = &v[*(const int *)b];
    return cmp_content(x->content, x->len, y->content, y->len);
}

/* The lookup indices of tok_added_by_id and tok_added_is_special. */
static int index_lookups(tok_added_set *s) {
    if (!s->n)
        return TOK_OK;
    s->by_id = malloc((size_t)s->n * sizeof *s->by_id);
    s->specials = malloc((size_t)s->n * sizeof *s->specials);
    if (!s->by_id || !s->specials)
        return TOK_ENOMEM;
    for (int i = 0; i < s->n; i++) {
        s->by_id[i] = i;
        if (s->v[i].special)
            s->specials[s->nspecials++] = i;
    }
    qsort_r(s->by_id, (size_t)s->n, sizeof *s->by_id, by_id_then_index, s->v);
    qsort_r(s->specials, (size_t)s->nspecials, sizeof *s->specials, by_content, s->v);
    return TOK_OK;
}

int tok_added_load(tok_added_set *s, json_t *arr, int64_t max_id, const char *file, char *err,
                   size_t err_len) {
    memset(s, 0, sizeof *s);
    size_t n = json_array_size(arr), i;
    if (n > TOK_ADDED_MAX) {
        tok_set_err(err, err_len, "%s: more than %d added tokens", file, TOK_ADDED_MAX);
        return TOK_ELOAD;
    }
    if (n && (!(s->v = calloc(n, sizeof *s->v)) || !(s->order = calloc(n, sizeof *s->order)))) {
        tok_set_err(err, err_len, "%s: out of memory", file);
        return TOK_ENOMEM;
    }
    bool single_word = false;
    json_t *a;
    json_array_foreach(arr, i, a) {
        const char *content = json_string_value(json_object_get(a, "content"));
        json_t *id = json_object_get(a, "id");
        if (!content || !*content || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= max_id) {
            tok_set_err(err, err_len, "%s: added_tokens[%zu] without content or id", file, i);
            return TOK_ELOAD;
        }
        tok_added_token *t = &s->v[s->n];
        t->len = json_string_length(json_object_get(a, "content"));
        t->content = malloc(t->len + 1);
        if (!t->content) {
            tok_set_err(err, err_len, "%s: out of memory", file);
            return TOK_ENOMEM;
        }
        memcpy(t->content, content, t->len + 1);
        s->n++;
        t->match = t->content;
        t->match_len = t->len;
        t->id = (int32_t)json_integer_value(id);
        t->lstrip = json_is_true(json_object_get(a, "lstrip"));
        t->rstrip = json_is_true(json_object_get(a, "rstrip"));
        t->single_word = json_is_true(json_object_get(a, "single_word"));
        t->normalized = json_is_true(json_object_get(a, "normalized"));
        t->special = json_is_true(json_object_get(a, "special"));
        s->any_normalized |= t->normalized;
        single_word |= t->single_word;
    }
    index_tokens(s);
    if (index_lookups(s) != TOK_OK) {
        tok_set_err(err, err_len, "%s: out of memory", file);
        return TOK_ENOMEM;
    }
    return single_word ? make_word_bitmap(s, file, err, err_len) : TOK_OK;
}

int tok_added_set_match(tok_added_set *s, int i, const char *match, size_t len) {
    tok_added_token *t = &s->v[i];
    char *m = malloc(len + 1);
    if (!m)
        return TOK_ENOMEM;
    memcpy(m, match, len);
    m[len] = '\0';
    if (t->match != t->content)
        free(t->match);
    t->match = m;
    t->match_len = len;
    index_tokens(s);
    return TOK_OK;
}

void tok_added_free(tok_added_set *s) {
    for (int i = 0; i < s->n; i++) {
        if (s->v[i].match != s->v[i].content)
            free(s->v[i].match);
        free(s->v[i].content);
    }
    free(s->v);
    free(s->order);
    free(s->word);
    free(s->by_id);
    free(s->specials);
    memset(s, 0, sizeof *s);
}

const tok_added_token *tok_added_by_id(const tok_added_set *s, int32_t id) {
    /* The first of by_id whose id is not below id. */
    int lo = 0, hi = s->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (s->v[s->by_id[mid]].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->v[s->by_id[lo]].id == id ? &s->v[s->by_id[lo]] : NULL;
}

bool tok_added_is_special(const tok_added_set *s, const char *text, size_t len) {
    int lo = 0, hi = s->nspecials;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const tok_added_token *t = &s->v[s->specials[mid]];
        const int c = cmp_content(t->content, t->len, text, len);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* The character that ends text[0, at) (valid UTF-8) and where it starts. */
static uint32_t char_before(const char *text, size_t at, size_t *start) {
    size_t q = at - 1;
    while (q > 0 && ((uint8_t)text[q] & 0xC0) == 0x80)
        q--;
    uint32_t cp = 0;
    tok_utf8_get((const uint8_t *)text + q, at - q, &cp);
    *start = q;
    return cp;
}

/* The leftmost-longest match at or after from, or NULL. */
static const tok_added_token *leftmost_longest(const tok_added_set *s, uint8_t kind,
                                               const char *text, size_t len, size_t from,
                                               size_t *at) {
    for (size_t p = from; p < len; p++) {
        if (!(s->first[(uint8_t)text[p]] & kind))
            continue;
        uint8_t b = (uint8_t)text[p];
        for (int k = s->at[b]; k < s->at[b + 1]; k++) {
            const tok_added_token *a = &s->v[s->order[k]];
            if ((a->normalized ? 2 : 1) == kind && a->match_len <= len - p &&
                memcmp(text + p, a->match, a->match_len) == 0) {
                *at = p;
                return a;
            }
        }
    }
    return NULL;
}

const tok_added_token *tok_added_next(const tok_added_set *s, bool normalized, const char *text,
                                      size_t len, tok_added_iter *it, size_t *start, size_t *end) {
    uint8_t kind = normalized ? 2 : 1;
    for (;;) {
        size_t p;
        const tok_added_token *a = leftmost_longest(s, kind, text, len, it->search, &p);
        if (!a)
            return NULL;
        size_t stop = p + a->match_len;
        it->search = stop;
        if (a->single_word) {
            size_t q;
            uint32_t cp = 0;
            bool word_before = p > 0 && is_word(s, char_before(text, p, &q));
            bool word_after = stop < len &&
                              tok_utf8_get((const uint8_t *)text + stop, len - stop, &cp) &&
                              is_word(s, cp);
            if (word_before || word_after)
                continue; /* the automaton goes on after the dropped match */
        }
        size_t from = p;
        if (a->lstrip) {
            /* Not into the previous kept match, as the library's max(). */
            size_t q;
            while (from > it->floor && is_space(char_before(text, from, &q)))
                from = q;
        }
        if (a->rstrip) {
            uint32_t cp = 0;
            size_t k;
            while (stop < len &&
                   (k = tok_utf8_get((const uint8_t *)text + stop, len - stop, &cp)) &&
                   is_space(cp))
                stop += k;
        }
        it->floor = stop;
        *start = from;
        *end = stop;
        return a;
    }
}
