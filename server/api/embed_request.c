/* embed_request.c — the one path from an embeddings request to a job (its
 * inputs tokenized or taken as token ids, chunked when asked) and the one
 * place a finished job's vectors are post-processed (embed_request.h). */
#include "server/api/embed_request.h"

#include <string.h>

#include "server/api/embed_chunk.h"
#include "server/api/errors.h"
#include "server/api/job_tokens.h"
#include "server/work/membudget.h"

typedef embed_refusal refusal;

embed_request embed_request_of(const embed_api *api, json_t *input, const char *field,
                               embed_inputs grammar) {
    return (embed_request){.input = input,
                           .field = field,
                           .grammar = grammar,
                           .truncate = api->truncate,
                           .direction = EMBED_TRUNCATE_RIGHT,
                           .answer = API_OPENAI,
                           .normalize = true,
                           .p_norm = EMBED_PNORM_NONE};
}

/* ---- one input ------------------------------------------------------------------------- */

/* Text input i, after the prompt when there is one, tokenized into the job
 * as sentence-transformers does for this model. */
static int take_text(const embed_api *api, const embed_request *q, embed_job *job, int32_t i,
                     json_t *in, refusal *r) {
    const char *text = json_string_value(in);
    size_t len = json_string_length(in);
    const int32_t max_len = embed_max_seq_length(api);
    if (embed_check_text((size_t)i, len, r) != SRV_OK)
        return r->err;
    if (job_tokens_reserve(job, (size_t)job->cu[i], (size_t)max_len, false) != 0)
        return refuse(r, SRV_EINTERNAL, "out of memory");
    char *joined = NULL;
    if (q->prompt && *q->prompt) {
        const size_t pl = strlen(q->prompt);
        if (!(joined = membudget_malloc(pl + len + 1)))
            return refuse(r, SRV_EINTERNAL, "out of memory");
        memcpy(joined, q->prompt, pl);
        memcpy(joined + pl, text, len);
        text = joined;
        len += pl;
    }
    int32_t n = 0, n_full = 0;
    size_t error_at = 0;
    const int rc = embed_tokenize(api, text, len, q->truncate, q->direction, job->ids + job->cu[i],
                                  &n, &n_full, &error_at);
    membudget_free(joined);
    if (rc == TOK_ETOOLONG)
        return refuse(r, SRV_EINVALID,
                      "input %d has %d tokens; max_seq_length is %d and truncation is off", (int)i,
                      (int)n_full, (int)max_len);
    if (rc != TOK_OK)
        return job_tokens_refuse(rc, i, error_at, SRV_EINTERNAL, r);
    job->cu[i + 1] = job->cu[i] + n;
    return SRV_OK;
}

/* Token ids go to the model as given: in the vocabulary, 1..max length. */
static int take_ids(const embed_api *api, embed_job *job, int32_t i, json_t *arr, refusal *r) {
    const size_t len = json_array_size(arr);
    const int32_t max_len = embed_max_id_length(api), vocab = api->model->vocab_size;
    if (len == 0)
        return refuse(r, SRV_EBADREQUEST, "input %d is an empty array of token ids", (int)i);
    if (len > (size_t)max_len)
        return refuse(r, SRV_EINVALID,
                      "input %d has %zu token ids; at most %d are taken (the model's "
                      "positions, within max_batch_tokens)",
                      (int)i, len, (int)max_len);
    if (job_tokens_reserve(job, (size_t)job->cu[i], len, false) != 0)
        return refuse(r, SRV_EINTERNAL, "out of memory");
    for (size_t k = 0; k < len; k++) {
        json_t *x = json_array_get(arr, k);
        if (!json_is_integer(x))
            return refuse(r, SRV_EBADREQUEST, "input %d, token %zu is not an integer id", (int)i,
                          k);
        json_int_t id = json_integer_value(x);
        /* LangChain's OpenAIEmbeddings sends tiktoken ids (cl100k, about
         * 100k of them) unless check_embedding_ctx_length is false: ids past
         * this vocabulary are the sign, and no BERT model can read them. */
        if (id < 0 || id >= vocab)
            return refuse(r, SRV_EINVALID,
                          "input %d, token %zu: id %lld outside the vocabulary [0, %d) of this "
                          "model's tokenizer; token ids must come from this model's tokenizer "
                          "(tiktoken ids, as LangChain's OpenAIEmbeddings sends by default, are "
                          "not: set check_embedding_ctx_length=False to send text)",
                          (int)i, k, (long long)id, (int)vocab);
        job->ids[job->cu[i] + (int32_t)k] = (int32_t)id;
    }
    job->cu[i + 1] = job->cu[i] + (int32_t)len;
    return SRV_OK;
}

/* Input i, a text or token ids. The mixed grammar checks each input's shape
 * here; the others checked them all before (embed_inputs_shape). */
static int take_input(const embed_api *api, const embed_request *q, embed_job *job, int32_t i,
                      json_t *in, refusal *r) {
    if (json_is_string(in))
        return take_text(api, q, job, i, in, r);
    if (q->grammar == EMBED_INPUTS_MIXED && json_is_array(in) && json_array_size(in) == 0)
        return refuse(r, SRV_EEMPTY, "input %d is an empty array of token ids", (int)i);
    if (q->grammar == EMBED_INPUTS_MIXED &&
        !(json_is_array(in) && json_is_integer(json_array_get(in, 0))))
        return refuse(r, SRV_EBADREQUEST,
                      "input %d must be a string or a non-empty array of token ids", (int)i);
    return take_ids(api, job, i, in, r);
}

/* ---- the job ------------------------------------------------------------------------------ */

/* The job of plain (unchunked) inputs. */
static embed_job *inputs_job(const embed_api *api, const embed_request *q, refusal *r) {
    int32_t n = 0;
    json_t *list = NULL;
    if (embed_inputs_shape(api, q->field, q->input, q->grammar, &n, &list, r) != SRV_OK)
        return NULL;
    embed_job *job = job_tokens_new(n);
    if (!job) {
        refuse(r, SRV_EINTERNAL, "out of memory");
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        if (take_input(api, q, job, i, list ? json_array_get(list, (size_t)i) : q->input, r) !=
            SRV_OK)
            goto fail;
    /* Any number of inputs up to max_inputs_per_request. */
    if (job_tokens_seal(job, api->max_batch_tokens, api->model->output_dim, api->kind, api->group,
                        SRV_EINTERNAL, r) == SRV_OK)
        return job;
fail:
    embed_job_release(job);
    return NULL;
}

/* The answer's settings, and what they need beside the vectors. */
static int answer_of(const embed_api *api, const embed_request *q, embed_job *job, refusal *r) {
    job->api = q->answer;
    job->normalize = q->normalize;
    job->has_p_norm = q->p_norm != EMBED_PNORM_NONE;
    job->p_norm = q->p_norm;
    job->dimensions = (int)q->dimensions;
    job->base64 = q->base64;
    if (q->answer == API_OPENAI) {
        /* A copy, charged to the budget: the request's tree is freed next. */
        job->model = q->model
                         ? json_stringn(json_string_value(q->model), json_string_length(q->model))
                         : json_string(api->model_name);
        if (!job->model)
            return refuse(r, SRV_EINTERNAL, "out of memory");
    }
    if (q->hidden) {
        const size_t C = (size_t)api->model->hidden_size;
        job->hidden = membudget_malloc((size_t)job->cu[job->n] * C * sizeof *job->hidden);
        if (!job->hidden)
            return refuse(r, SRV_EMEMORY, "out of memory");
    }
    return SRV_OK;
}

embed_job *embed_request_job(const embed_api *api, const embed_request *q, refusal *r) {
    /* A classifier is refused before its inputs or its chunking are read,
     * whatever else the request asks. */
    if (embed_check_task(api, r) != SRV_OK)
        return NULL;
    embed_chunking ch;
    bool streamed;
    if (q->chunking && q->prompt && *q->prompt) {
        /* A prompt would sit before every chunk and shift its offsets: it is
         * refused, the model's default one included, not dropped silently. */
        refuse(r, SRV_EINVALID,
               "chunking does not apply a prompt (prompt_name, or the model's default prompt)");
        return NULL;
    }
    if (q->chunking && embed_chunking_parse(api, q->chunking, &ch, r) != SRV_OK)
        return NULL;
    if (embed_stream_parse(q->stream, q->chunking, &streamed, r) != SRV_OK)
        return NULL;
    /* Every refusal from here on is about the inputs. */
    r->param = q->field;
    embed_job *job =
        q->chunking ? embed_chunk_job(api, q->field, q->input, &ch, r) : inputs_job(api, q, r);
    if (!job)
        return NULL;
    r->param = NULL;
    job->stream = streamed;
    if (answer_of(api, q, job, r) != SRV_OK) {
        embed_job_release(job);
        return NULL;
    }
    return job;
}
