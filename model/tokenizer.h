/* tokenizer.h — tokenizers from a Hugging Face model directory, id for id and
 * offset for offset equal to Hugging Face `tokenizers`.
 *
 * tok_load picks the model from tokenizer.json's model.type:
 *   WordPiece  BERT family and MPNet (BertNormalizer + BertPreTokenizer +
 *              WordPiece), or vocab.txt when there is no tokenizer.json;
 *   Unigram    SentencePiece models (XLM-RoBERTa, multilingual-e5, bge-m3):
 *              normalizers Precompiled, NFC, NFD, NFKC, NFKD, Replace, Strip,
 *              Lowercase, Sequence;
 *              pre-tokenizers Metaspace, WhitespaceSplit, Split (String or
 *              Regex, PCRE2 for Oniguruma), ByteLevel, Sequence;
 *              post-processors TemplateProcessing, RobertaProcessing,
 *              BertProcessing; decoders Metaspace, ByteFallback, Fuse, Strip,
 *              Replace, Sequence;
 *   BPE        byte-level (RoBERTa, ModernBERT, Qwen3) or with byte fallback
 *              (Gemma), through the same pieces plus the ByteLevel
 *              pre-tokenizer, decoder and post-processor, and a Sequence of
 *              ByteLevel and one post-processor that adds tokens.
 * Added tokens with lstrip, rstrip, single_word and normalized (not on
 * WordPiece) are found as the library finds them (model/tok_added.h).
 * Any other model type, normalizer, pre-tokenizer, post-processor or decoder
 * is refused at load, by name, rather than approximated.
 *
 * A tokenizer is loaded once from a model directory and is read-only after,
 * so any number of threads may call tok_encode on it at the same time. */
#ifndef ATTN_TOKENIZER_H
#define ATTN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* ---- errors ---------------------------------------------------------------
 * Negative codes, one list; tok_strerror() gives the message. */
#define TOK_ERRORS(X)                                                                              \
    X(TOK_OK, 0, "success")                                                                        \
    X(TOK_EINVAL, -1, "invalid argument")                                                          \
    X(TOK_EUTF8, -2, "input is not valid UTF-8")                                                   \
    X(TOK_ETOOLONG, -3, "input has more tokens than the maximum")                                  \
    X(TOK_ENOMEM, -4, "out of memory")                                                             \
    X(TOK_ELOAD, -5, "cannot load the tokenizer")                                                  \
    X(TOK_ENOPAIR, -6, "the tokenizer has no template for a pair of texts")                        \
    X(TOK_ECOMPLEX, -7, "input too complex for the tokenizer's Split pattern")

enum {
#define TOK_ERR_ENUM(name, code, msg) name = code,
    TOK_ERRORS(TOK_ERR_ENUM)
#undef TOK_ERR_ENUM
};

const char *tok_strerror(int err);

typedef struct tok_tokenizer tok_tokenizer;

/* Loads the tokenizer of a Hugging Face model directory: tokenizer.json when
 * present (the model chosen by model.type), else vocab.txt with
 * tokenizer_config.json (WordPiece: do_lower_case, strip_accents,
 * tokenize_chinese_chars, the special token names). Anything this tokenizer
 * cannot reproduce exactly (another model type, normalizer, pre-tokenizer or
 * decoder, WordPiece added tokens with normalized) is refused, by name,
 * rather than approximated. Returns TOK_OK and *out, or TOK_ELOAD /
 * TOK_ENOMEM with a message naming the file and the problem in err. */
int tok_load(tok_tokenizer **out, const char *model_dir, char *err, size_t err_len);

void tok_free(tok_tokenizer *t);

/* The model family: "WordPiece", "Unigram" or "BPE". */
const char *tok_model_type(const tok_tokenizer *t);

/* A token's place in the input: bytes [start, end) of the text given to
 * tok_encode. Special tokens added by the post-processor have {0, 0}. */
typedef struct tok_span {
    uint32_t start, end;
} tok_span;

/* Where tok_encode writes. The caller owns the arrays and sets capacity, which
 * is also the maximum sequence length (special tokens included; the service
 * passes the model's maximum, 512). */
typedef struct tok_output {
    int32_t *ids;      /* [capacity] */
    tok_span *offsets; /* [capacity], or NULL when not wanted */
    uint8_t *special;  /* [capacity], or NULL: 1 for a token the post-processor
                          added, else 0 (the library's special_tokens_mask: an
                          added token written in the text, "<mask>", is 0).
                          Use it, not an empty span, to tell them: trimmed
                          offsets (BPE) can leave spaces with an empty span. */
    int32_t *type_ids; /* [capacity], or NULL: each token's type (segment) id;
                          tok_encode writes 0, tok_encode_pair what the
                          pair template says */
    int32_t capacity;
    int32_t n;       /* out: ids written (after truncation) */
    int32_t n_full;  /* out: tokens the input has without truncation, specials included */
    size_t error_at; /* out: on TOK_EUTF8, the byte offset of the first invalid byte */
} tok_output;

/* Tokenizes text[0, len) (UTF-8, need not be NUL-terminated) into
 * [CLS] pieces... [SEP] (or whatever the model's post-processor adds).
 * truncate != 0: keeps the first capacity - tok_num_special() pieces.
 * truncate == 0: returns TOK_ETOOLONG when n_full > capacity (n_full is set,
 * so the caller can say how long the input is).
 * Invalid UTF-8 (overlong forms, surrogates, > U+10FFFF, cut sequences) gives
 * TOK_EUTF8 and error_at. capacity below tok_num_special() gives TOK_EINVAL.
 * A Split pattern that backtracks past PCRE2's match or depth limit on this
 * input gives TOK_ECOMPLEX (the input's fault: a client error); past its
 * heap limit, TOK_ENOMEM.
 *
 * Memory, WordPiece: besides the caller's arrays, 28 m + 16 bytes of word
 * scratch (m = max_input_chars_per_word), plus, only for runs of reorderable
 * combining marks that strip_accents keeps, at most 72 bytes per mark of the
 * longest such run (two arrays of 12-byte characters grown by doubling, old
 * and new both live while one grows); NFD yields at most one mark per input
 * byte (U+01D5 is 2 bytes and 2 marks), so at most 72 bytes per input byte. Unigram and BPE
 * normalize the text between two added tokens whole, as the library does (tok_pipeline.c): with N
 * the normalized characters of that text and W those of its longest word, at most 208 N + 200 W
 * bytes (four arrays of 12-byte characters, the word bounds and three of 8-byte changes, each grown
 * by doubling; the word's bytes, lattice or merge queue; BPE with byte fallback, up to four
 * symbols of 20 bytes a character and their merge queue, 224 W in place of 200 W). Added tokens
 * with normalized true add
 * 8 bytes per normalized byte of that text (its UTF-8 and where each byte's character is). N is at
 * most len times the normalizers' growth (a charsmap rule's longest right side, 3 for Lowercase, a
 * Replace's content, 6 characters per input byte for NFKC/NFKD (U+FDFA, 3 bytes, is 18
 * characters), 1.5 for NFC/NFD) times 2 for Metaspace or 8 for ByteLevel; for
 * ordinary text N is about len and W is small. A Split pre-tokenizer adds
 * 52 bytes per character of the longest word it cuts (at most N: its UTF-8
 * and the pieces) and PCRE2's match frames, capped at 1 MiB per match.
 * Time is linear in len: the whole input is read even when truncating, to
 * give n_full. Thread-safe on a shared tokenizer. On error, ids and offsets
 * are unspecified. */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int truncate, tok_output *out);

/* Where tok_encode takes its scratch from (Unigram and BPE: the normalized
 * text, the words, the lattice or merge queue, PCRE2's match frames;
 * WordPiece: the word scratch and the combining-mark run; bounds above): realloc
 * and free unless set. The service points it at its request-memory budget,
 * so a refused block fails that encode with TOK_ENOMEM instead of being
 * allocated outside the bound. Set it before any tok_encode runs; blocks
 * never outlive one tok_encode call. realloc_fn(NULL, n) must allocate. */
void tok_set_alloc_funcs(void *(*realloc_fn)(void *, size_t), void (*free_fn)(void *));

/* Which end of a sequence truncation cuts (Hugging Face's
 * TruncationDirection). */
typedef enum tok_truncation {
    TOK_TRUNCATE_NONE = 0,  /* too long: TOK_ETOOLONG */
    TOK_TRUNCATE_RIGHT = 1, /* keep the first pieces */
    TOK_TRUNCATE_LEFT = 2,  /* keep the last pieces */
} tok_truncation;

/* Tokenizes the pair (a[0, alen), b[0, blen)) as Hugging Face `tokenizers`
 * encodes a pair with add_special_tokens: each text is encoded on its own,
 * without special tokens; the two are truncated together, strategy
 * longest_first (the library's default), so that the pair with the pair
 * template's special tokens fits out->capacity; then the post-processor's
 * pair template puts them together:
 *   BertProcessing      [CLS] a [SEP] b [SEP]      types 0..0 1..1
 *   RobertaProcessing   <s> a </s> </s> b </s>     types all 0
 *   TemplateProcessing  its "pair" template, type ids as it gives them
 *   none                a b                        types 0..0 1..1
 * (a directory with only vocab.txt is BERT's). offsets are bytes of the
 * token's own text (a or b); special marks the template's tokens.
 * longest_first: with n1 <= n2 the body lengths and m the room left by the
 * specials, the shorter keeps min(n1, m / 2) when both must be cut, else
 * all of it, and the longer the rest; trunc says which end of each is cut.
 * TOK_TRUNCATE_NONE gives TOK_ETOOLONG (n_full set) when the pair does not
 * fit. TOK_ENOPAIR: the tokenizer has no pair template (a TemplateProcessing
 * without "pair"). TOK_EINVAL: capacity below the pair's special tokens.
 * TOK_EUTF8: error_at counts bytes of a then b, so error_at >= alen is byte
 * error_at - alen of b.
 *
 * Memory: besides tok_encode's, each text's tokens once, in scratch of 13
 * bytes per token (ids, offsets, mask) freed before returning: at most
 * 13 * (tokens of a + tokens of b) when cutting on the left, else about
 * 13 * 2 * capacity. Thread-safe on a shared tokenizer. */
int tok_encode_pair(const tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                    tok_truncation trunc, tok_output *out);

/* tok_encode_pair in two steps, so that a text paired with many others
 * (a query with each document) is encoded once: each text alone with
 * tok_pair_text_encode, then each pair put together with tok_pair_assemble,
 * which reads the pieces and cuts them as tok_encode_pair does (same ids,
 * types, offsets, n_full and errors). */
typedef struct tok_pair_text {
    int32_t *ids; /* the text's pieces are [lead, lead + n) of the arrays */
    tok_span *offsets;
    uint8_t *special;
    int32_t cap;
    int32_t lead, n, full; /* full: its pieces untruncated */
    size_t error_at;       /* on TOK_EUTF8: the first invalid byte */
} tok_pair_text;

/* The pieces a text must keep for a pair of out capacity cut with trunc:
 * the room the pair template leaves, or -1 (all) for TOK_TRUNCATE_LEFT. */
int32_t tok_pair_keep(const tok_tokenizer *t, int32_t capacity, tok_truncation trunc);
/* Encodes s alone into x (zeroed first; reusable), keeping at least keep
 * pieces (all when keep < 0), in scratch from tok_set_alloc_funcs' allocator
 * (13 bytes a piece kept); free with tok_pair_text_free. */
int tok_pair_text_encode(const tok_tokenizer *t, const char *s, size_t len, int32_t keep,
                         tok_pair_text *x);
void tok_pair_text_free(tok_pair_text *x);
/* The pair (a, b) encoded with tok_pair_text_encode(..., tok_pair_keep(t,
 * out->capacity, trunc), ...) as tok_encode_pair gives it; TOK_EINVAL when
 * either holds fewer pieces than that. Allocates nothing. */
int tok_pair_assemble(const tok_tokenizer *t, const tok_pair_text *a, const tok_pair_text *b,
                      tok_truncation trunc, tok_output *out);

/* Number of special tokens the pair template adds (3 for BERT, 4 for
 * RoBERTa), or -1 when the tokenizer has no pair template. */
int32_t tok_num_special_pair(const tok_tokenizer *t);

/* Token ids back to text, as the tokenizer's decoder does (Hugging Face
 * `decode`): skip_special drops the special added tokens (<s>, [CLS], ...).
 * On TOK_OK *text is a malloc'd NUL-terminated string of *len bytes that the
 * caller frees. An id outside the vocabulary gives TOK_EINVAL. */
int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
               size_t *len);

/* Number of special tokens the post-processor adds to one sequence (2 for
 * [CLS] ... [SEP]). */
int32_t tok_num_special(const tok_tokenizer *t);

/* The vocabulary: ids are 0 .. tok_vocab_size() - 1. */
int32_t tok_vocab_size(const tok_tokenizer *t);

/* The string of token id ("##ing", "[CLS]"), or NULL for an id outside the
 * vocabulary or a hole in it. Valid as long as t. */
const char *tok_id_to_token(const tok_tokenizer *t, int32_t id);

/* The id of an exact vocabulary entry, or -1. */
int32_t tok_token_to_id(const tok_tokenizer *t, const char *token, size_t len);

/* The [UNK] id. */
int32_t tok_unk_id(const tok_tokenizer *t);

#endif
