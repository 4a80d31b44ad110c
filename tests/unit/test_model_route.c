/* test_model_route.c — finding the model a request names (server/api/embed_codec.h):
 * by name or alias over several models, the route's default when the body
 * names none or an unknown one, and the one set of refusals for `model`
 * that every route answers with. No model is loaded: routing reads names. */
#include <criterion/criterion.h>
#include <string.h>

#include "server/api/embed_codec.h"
#include "server/api/errors.h"

static embed_api minilm = {.model_name = "minilm", .model_aliases = "st/minilm, mini", .group = 0};
static embed_api rerank = {.model_name = "rerank", .group = 1};
static embed_api classify = {.model_name = "classify", .model_aliases = "labels", .group = 2};
static embed_api *const all[] = {&minilm, &rerank, &classify};

static void serve_all(void) {
    for (size_t i = 0; i < 3; i++) {
        all[i]->peers = all;
        all[i]->npeers = 3;
    }
}

static void serve_alone(void) {
    for (size_t i = 0; i < 3; i++) {
        all[i]->peers = NULL;
        all[i]->npeers = 0;
    }
}

static uint32_t route(const embed_api *api, const char *body, uint32_t dflt) {
    json_t *root = json_loads(body, 0, NULL);
    cr_assert_not_null(root, "%s", body);
    const uint32_t i = embed_route_index(api, root, dflt);
    json_decref(root);
    return i;
}

Test(model_route, finds_a_model_by_name_or_alias_among_several) {
    serve_all();
    cr_assert_eq(embed_model_find(&rerank, "minilm", 6), 0);
    cr_assert_eq(embed_model_find(&rerank, "mini", 4), 0);
    cr_assert_eq(embed_model_find(&minilm, "st/minilm", 9), 0);
    cr_assert_eq(embed_model_find(&minilm, "labels", 6), 2);
    cr_assert_eq(embed_model_find(&minilm, "rerank", 6), 1);
    cr_assert_eq(embed_model_find(&minilm, "rerank2", 7), -1);
    cr_assert_eq(embed_model_find(&minilm, "", 0), -1, "an empty name is no alias");
    cr_assert_eq(embed_model_find(&minilm, "minil", 5), -1, "a prefix is not the name");
}

Test(model_route, alone_a_model_finds_only_itself) {
    serve_alone();
    cr_assert_eq(embed_model_find(&minilm, "mini", 4), 0);
    cr_assert_eq(embed_model_find(&minilm, "rerank", 6), -1);
    /* Alone, the body never moves the request: the route's own model. */
    cr_assert_eq(route(&minilm, "{\"model\": \"rerank\"}", 0), 0);
}

Test(model_route, a_body_goes_to_the_model_it_names_else_the_default) {
    serve_all();
    cr_assert_eq(route(&minilm, "{\"model\": \"labels\"}", 0), 2);
    cr_assert_eq(route(&minilm, "{\"model\": \"rerank\"}", 0), 1);
    cr_assert_eq(route(&classify, "{\"input\": \"x\"}", 1), 1, "none named: the default");
    cr_assert_eq(route(&classify, "{\"model\": null}", 1), 1);
    cr_assert_eq(route(&classify, "{\"model\": 3}", 2), 2);
    cr_assert_eq(route(&classify, "{\"model\": \"nope\"}", 2), 2, "unknown: the default refuses");
    cr_assert_eq(route(&classify, "[1, 2]", 0), 0);
}

static int check(const embed_api *api, const char *body, embed_refusal *r) {
    json_t *root = json_loads(body, 0, NULL);
    cr_assert_not_null(root, "%s", body);
    memset(r, 0, sizeof *r);
    const int rc = embed_check_model(api, json_object_get(root, "model"), r);
    json_decref(root);
    return rc;
}

Test(model_route, every_route_refuses_model_the_same_way) {
    serve_all();
    embed_refusal r;
    cr_assert_eq(check(&minilm, "{}", &r), SRV_OK);
    cr_assert_eq(check(&minilm, "{\"model\": null}", &r), SRV_OK);
    cr_assert_eq(check(&minilm, "{\"model\": \"st/minilm\"}", &r), SRV_OK);
    cr_assert_null(r.param);
    cr_assert_eq(check(&minilm, "{\"model\": 7}", &r), SRV_EBADREQUEST);
    cr_assert_str_eq(r.param, "model");
    cr_assert_str_eq(r.msg, "model must be a string");
    /* Another served model's name is not this one's: routing sends a
     * request there first, so only an unknown name gets here. */
    cr_assert_eq(check(&minilm, "{\"model\": \"nope\"}", &r), SRV_ENOTFOUND);
    cr_assert_str_eq(r.param, "model");
    cr_assert_str_eq(r.code, "model_not_found");
    cr_assert_str_eq(r.msg, "The model `nope` does not exist; served: `minilm`, `rerank`, "
                            "`classify` (their aliases: GET /v1/models)");
    minilm.accept_any_model = true;
    cr_assert_eq(check(&minilm, "{\"model\": \"nope\"}", &r), SRV_OK);
    minilm.accept_any_model = false;
    serve_alone();
    cr_assert_eq(check(&minilm, "{\"model\": \"rerank\"}", &r), SRV_ENOTFOUND);
    cr_assert_str_eq(r.msg,
                     "The model `rerank` does not exist; served: `minilm` (their aliases: GET "
                     "/v1/models)");
}
