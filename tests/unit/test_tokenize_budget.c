/* test_tokenize_budget.c — /tokenize's answer (embed_api_tokens) under the
 * request-memory budget. For every budget from nothing to enough, in the
 * allocator's 16-byte steps, the answer is either built whole and equal to
 * the one made without a budget, with nothing refused, or not built at all
 * with the refusal noted (the route then answers the budget's 503 or 413):
 * never a document in which a refused allocation was papered over, such as
 * a token's text replaced by "[UNK]" because its string was refused. And
 * every byte charged is given back.
 *
 * Needs the model directory (default models/all-MiniLM-L6-v2, or
 * $ATTN_TEST_MODEL_DIR) for the tokenizer and config.json; no weights. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/bert.h"
#include "model/tokenizer.h"
#include "server/api/embed_api.h"
#include "server/api/errors.h"
#include "server/work/membudget.h"

static const char *model_dir(void) {
    const char *d = getenv("ATTN_TEST_MODEL_DIR");
    return d && *d ? d : "models/all-MiniLM-L6-v2";
}

/* One run of the route's tokenizing in a budget scope; *refused is
 * membudget_refused() at its end. */
static json_t *tokens_in_scope(const embed_api *api, json_t *root, int *refused) {
    int err = SRV_OK;
    char msg[256];
    membudget_enter(0);
    json_t *out = embed_api_tokens(api, root, &err, msg, sizeof msg);
    *refused = membudget_refused();
    membudget_leave();
    return out;
}

Test(tokenize_budget, a_refusal_never_yields_an_answer) {
    char err[512] = "";
    tok_tokenizer *tok = NULL;
    encoder_desc *desc = NULL;
    cr_assert_eq(tok_load(&tok, model_dir(), err, sizeof err), TOK_OK,
                 "cannot load the tokenizer from %s (%s): run `make model`", model_dir(), err);
    cr_assert_eq(encoder_describe(model_dir(), &desc, err, sizeof err), 0, "%s", err);
    embed_api api = {.tok = tok,
                     .model = encoder_desc_info(desc),
                     .model_name = "test",
                     .max_batch_tokens = 16384,
                     .max_batch_requests = 64,
                     .truncate = true};
    atomic_store(&api.max_inputs_per_request, 256);

    /* Installed before any JSON value exists (membudget.h). A word longer
     * than WordPiece's 100 characters is one [UNK] whose text is the whole
     * 3000-byte word: far more than its vocabulary string "[UNK]", so a
     * budget exists that refuses the one and takes the other. */
    membudget b;
    membudget_init(&b, (size_t)1 << 30);
    membudget_install(&b);
    char word[3001];
    memset(word, 'a', 3000);
    word[3000] = '\0';
    json_t *root = json_pack("{s:[s, s]}", "inputs", "Hello, world!", word);
    cr_assert_not_null(root);

    /* The answer, made outside any scope (charged nowhere), then once in a
     * scope with room to spare to learn what it needs. */
    int e = SRV_OK;
    char msg[256];
    json_t *want = embed_api_tokens(&api, root, &e, msg, sizeof msg);
    cr_assert_not_null(want, "%s", msg);
    json_t *unk = json_array_get(json_array_get(want, 1), 1); /* after [CLS] */
    cr_assert_str_eq(json_string_value(json_object_get(unk, "text")), word);
    int refused = 0;
    json_t *probe = tokens_in_scope(&api, root, &refused);
    cr_assert(probe && refused == 0 && json_equal(probe, want));
    json_decref(probe);
    cr_assert_eq(membudget_used(&b), 0);
    const size_t needed = membudget_peak(&b);
    cr_assert_gt(needed, 3000);

    unsigned built = 0, failed = 0;
    for (size_t limit = 0; limit <= needed; limit += 16) {
        membudget_init(&b, limit);
        json_t *out = tokens_in_scope(&api, root, &refused);
        if (out) {
            cr_assert_eq(refused, 0, "an answer built although the budget (%zu) refused", limit);
            cr_assert(json_equal(out, want), "a different answer under a budget of %zu", limit);
            built++;
        } else {
            cr_assert_neq(refused, 0, "no answer and no refusal under a budget of %zu", limit);
            failed++;
        }
        json_decref(out);
        cr_assert_eq(membudget_used(&b), 0, "bytes still charged after a budget of %zu", limit);
    }
    /* Both outcomes occurred: the sweep spans the answer's whole need. */
    cr_assert_gt(built, 0);
    cr_assert_gt(failed, 0);
    json_decref(want);
    json_decref(root);
    tok_free(tok);
    encoder_desc_free(desc);
}
