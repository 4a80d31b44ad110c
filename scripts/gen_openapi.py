#!/usr/bin/env python3
"""gen_openapi.py — writes server/http/openapi.json, the OpenAPI 3.1 document that
GET /openapi.json serves (the binary embeds the file).

Edit the routes here and run `python3 scripts/gen_openapi.py`; the e2e test
tests/e2e/test_openapi.py fails when the served document and the server's
route table differ, and schemathesis checks every answer against it.

Each route's errors are described in the shape of the API it imitates: TEI's
{"error", "error_type"} on TEI's routes, OpenAI's {"error": {...}} elsewhere.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "server", "http", "openapi.json")


def ref(name):
    return {"$ref": "#/components/schemas/" + name}


def json_body(schema, description="OK"):
    return {"description": description, "content": {"application/json": {"schema": schema}}}


OPENAI_ERROR = "Error"
TEI_ERROR = "TeiError"

# "stream", as both chunking embeddings bodies take it (OpenAI's, which Infinity's
# route shares, and TEI's).
STREAM = {"type": ["boolean", "null"], "default": False,
          "description": "With chunking only (422 without): the answer is NDJSON "
                         "(application/x-ndjson), a StreamedChunk line per chunk as its batch "
                         "completes, then a StreamedEnd line (or a StreamedError line, and the "
                         "stream is cut). A client that closes cancels the chunks not yet "
                         "computed."}

# How Cohere's quantized embedding types are made; also in the README.
QUANTIZATION = ("Quantized types are sentence-transformers' quantize_embeddings with the fixed "
                "ranges [-1, 1] in every dimension (a unit vector's values lie there): int8 and "
                "uint8 are buckets of width 2/255 from -1 (uint8 0..255, int8 = uint8 - 128); "
                "binary and ubinary are the bits value > 0, eight to a byte, the first value "
                "in the high bit (ubinary 0..255, binary = ubinary - 128); base64 is the float "
                "vector's little-endian bytes.")

SCHEMAS = {
    # ---- errors ----
    "Error": {
        "type": "object",
        "description": "Every error outside TEI's routes: OpenAI's shape, `code` repeats the "
                       "HTTP status.",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "code": {"type": ["integer", "string"]},
                    "param": {"type": ["string", "null"]},
                },
            }
        },
    },
    "TeiError": {
        "type": "object",
        "description": "Errors of TEI's routes, in TEI's shape.",
        "required": ["error", "error_type"],
        "properties": {
            "error": {"type": "string"},
            "error_type": {"type": "string",
                           "enum": ["Unhealthy", "Backend", "Overloaded", "Validation",
                                    "Tokenizer", "Empty"]},
        },
    },
    # ---- health ----
    "Status": {"type": "object", "required": ["status"],
               "properties": {"status": {"type": "string"}}},
    "Info": {
        "type": "object",
        "description": "The running configuration, limits, memory, the model, the self-test "
                       "and verification state. With several models (the models setting), "
                       "model and TEI's fields describe the first, models lists every one, "
                       "and memory sums their weights and workspaces.",
        "required": ["version", "backend", "limits", "memory", "model", "models"],
        "properties": {
            "version": {"type": "string"},
            "backend": {"type": "string"},
            "limits": {"type": "object"},
            "memory": {"type": "object"},
            "model": {"type": "object"},
            "models": {"type": "array", "items": {
                "type": "object",
                "description": "As model, with aliases, engine, precision, weights_bytes and "
                               "workspace_bytes."}},
        },
    },
    # ---- attention ----
    "Tensor": {
        "description": "[seq][heads][head_dim] numbers, or base64 little-endian float32 with "
                       "its shape.",
        "oneOf": [
            {"type": "array", "items": {"type": "array", "items": {
                "type": "array", "items": {"type": "number"}}}},
            {"type": "object", "required": ["shape", "data"], "additionalProperties": False,
             "properties": {"shape": {"type": "array", "items": {"type": "integer"},
                                      "minItems": 3, "maxItems": 3},
                            "data": {"type": "string", "contentEncoding": "base64"}}},
        ],
    },
    "AttentionRequest": {
        "type": "object", "required": ["q", "k", "v"], "additionalProperties": False,
        "properties": {"q": ref("Tensor"), "k": ref("Tensor"), "v": ref("Tensor"),
                       "causal": {"type": "boolean", "default": False}},
    },
    "AttentionResponse": {
        "type": "object", "required": ["output", "backend"],
        "properties": {"output": ref("Tensor"), "backend": {"type": "string"}},
    },
    # ---- OpenAI embeddings ----
    "TokenIds": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
    "OpenAIEmbeddingRequest": {
        "type": "object", "required": ["input"],
        "properties": {
            "input": {"oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ref("TokenIds"),
                {"type": "array", "items": ref("TokenIds"), "minItems": 1},
            ]},
            "model": {"type": ["string", "null"]},
            "encoding_format": {"enum": ["float", "base64", None]},
            "dimensions": {"type": ["integer", "null"], "minimum": 1},
            "user": {"type": ["string", "null"]},
            "chunking": ref("Chunking"),
            "stream": STREAM,
        },
    },
    "OpenAIEmbedding": {
        "type": "object", "required": ["object", "index", "embedding"],
        "properties": {
            "object": {"const": "embedding"},
            "index": {"type": "integer"},
            "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                    {"type": "string", "contentEncoding": "base64"},
                                    {"type": "null", "description": "chunking with "
                                     "document_vector \"none\""}]},
            "chunks": {"type": "array", "items": ref("Chunk"),
                       "description": "With `chunking`: the chunks of this input."},
        },
    },
    "OpenAIEmbeddingResponse": {
        "type": "object", "required": ["object", "data", "model", "usage"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": ref("OpenAIEmbedding")},
            "model": {"type": "string"},
            "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                      "properties": {"prompt_tokens": {"type": "integer"},
                                     "total_tokens": {"type": "integer"}}},
        },
    },
    # ---- chunking: whole documents on /v1/embeddings, /embeddings and /embed ----
    "Chunking": {
        "type": ["object", "null"],
        "description": "Cut each text input into chunks of at most max_tokens tokens (special "
                       "tokens included), consecutive chunks sharing `overlap` tokens, cut at "
                       "sentence, else whitespace, boundaries in the last quarter of a window. "
                       "Every chunk is embedded as its own text sent alone would be. Texts "
                       "only; a document has at most max_document_tokens tokens (413).",
        "properties": {
            "max_tokens": {"type": ["integer", "null"], "minimum": 1,
                           "description": "Default and ceiling: max_seq_length."},
            "overlap": {"type": ["integer", "null"], "minimum": 0, "default": 0,
                        "description": "At most half of max_tokens minus the special "
                                       "tokens (422 beyond); a request's chunks number at "
                                       "most max_inputs_per_request (422 beyond)."},
            "document_vector": {"enum": ["none", "mean", "token_weighted", None],
                                "default": "mean",
                                "description": "How the chunk vectors make the input's "
                                               "`embedding`, normalised as the route "
                                               "normalises; none: null."},
        },
    },
    "Chunk": {
        "type": "object", "required": ["index", "start", "stop", "tokens", "embedding"],
        "properties": {
            "index": {"type": "integer", "minimum": 0},
            "start": {"type": "integer", "minimum": 0,
                      "description": "Byte offset into the input as UTF-8 (as /tokenize)."},
            "stop": {"type": "integer", "minimum": 0, "description": "Exclusive."},
            "tokens": {"type": "integer", "minimum": 1,
                       "description": "Tokens embedded, special tokens included."},
            "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                    {"type": "string", "contentEncoding": "base64"}]},
        },
    },
    # ---- streamed chunking: NDJSON lines ----
    "StreamedChunk": {
        "type": "object",
        "required": ["document", "index", "start", "stop", "tokens", "embedding"],
        "description": "One chunk, as in the unstreamed answer's chunks, with its document.",
        "properties": {
            "document": {"type": "integer", "minimum": 0},
            "index": {"type": "integer", "minimum": 0},
            "start": {"type": "integer", "minimum": 0},
            "stop": {"type": "integer", "minimum": 0},
            "tokens": {"type": "integer", "minimum": 1},
            "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                    {"type": "string", "contentEncoding": "base64"}]},
        },
    },
    "StreamedEnd": {
        "type": "object", "required": ["data", "usage"],
        "description": "The last line: each document's vector (null with document_vector "
                       "none) and chunk count; object and model on the OpenAI route.",
        "properties": {
            "object": {"const": "list"},
            "model": {"type": "string"},
            "data": {"type": "array", "items": {
                "type": "object", "required": ["index", "embedding", "chunks"],
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                            {"type": "string", "contentEncoding": "base64"},
                                            {"type": "null"}]},
                    "chunks": {"type": "integer", "minimum": 1}}}},
            "usage": {"type": "object", "properties": {
                "prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}},
        },
    },
    "StreamedError": {
        "type": "object", "required": ["error"],
        "description": "A failure after the 200 was sent (a deadline, the memory budget): "
                       "the last line, and the stream ends without its terminating chunk.",
        "properties": {"error": {"type": "object", "required": ["message", "code"], "properties": {
            "message": {"type": "string"}, "code": {"type": "integer"}}}},
    },
    # ---- TEI ----
    "TeiInput": {
        "description": "A text, an array of token ids, or an array of texts and token-id arrays.",
        "oneOf": [
            {"type": "string"},
            ref("TokenIds"),
            {"type": "array", "minItems": 1,
             "items": {"oneOf": [{"type": "string"}, ref("TokenIds")]}},
        ]},
    "TruncationDirection": {"enum": ["left", "right", "Left", "Right", None]},
    "TeiEmbedRequest": {
        "type": "object", "required": ["inputs"],
        "properties": {
            "inputs": ref("TeiInput"),
            "normalize": {"type": ["boolean", "null"], "default": True},
            "truncate": {"type": ["boolean", "null"]},
            "truncation_direction": ref("TruncationDirection"),
            "prompt_name": {"type": ["string", "null"],
                            "description": "A key of the model's config_sentence_transformers.json "
                                           "prompts; its text is prepended to every text."},
            "dimensions": {"type": ["integer", "null"], "minimum": 1},
            "chunking": ref("Chunking"),
            "stream": STREAM,
        },
    },
    "TeiEmbedAllRequest": {
        "type": "object", "required": ["inputs"],
        "properties": {
            "inputs": ref("TeiInput"),
            "truncate": {"type": ["boolean", "null"]},
            "truncation_direction": ref("TruncationDirection"),
            "prompt_name": {"type": ["string", "null"]},
        },
    },
    "TeiEmbedAllResponse": {"type": "array", "items": {"type": "array", "items": {
        "type": "array", "items": {"type": "number"}}}},
    "TeiEmbedResponse": {"oneOf": [
        {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        {"type": "array", "description": "With `chunking`: per input, its document vector "
                                         "and its chunks.",
         "items": {"type": "object", "required": ["embedding", "chunks"],
                   "properties": {"embedding": {"type": ["array", "null"],
                                                "items": {"type": "number"}},
                                  "chunks": {"type": "array", "items": ref("Chunk")}}}},
    ]},
    "TeiSimilarityRequest": {
        "type": "object", "required": ["inputs"],
        "properties": {
            "inputs": {"type": "object", "required": ["source_sentence", "sentences"],
                       "properties": {"source_sentence": {"type": "string"},
                                      "sentences": {"type": "array", "minItems": 1,
                                                    "items": {"type": "string"}}}},
            "parameters": {"type": ["object", "null"],
                           "properties": {
                               "truncate": {"type": ["boolean", "null"]},
                               "truncation_direction": ref("TruncationDirection"),
                               "prompt_name": {"type": ["string", "null"]}}},
        },
    },
    "TeiSimilarityResponse": {"type": "array", "items": {"type": "number"}},
    "TeiDecodeRequest": {
        "type": "object", "required": ["ids"],
        "properties": {
            "ids": {"oneOf": [ref("TokenIds"), {"type": "array", "minItems": 1,
                                                "items": ref("TokenIds")}]},
            "skip_special_tokens": {"type": ["boolean", "null"], "default": True},
        },
    },
    "TeiDecodeResponse": {"type": "array", "items": {"type": "string"}},
    "TeiTokenizeRequest": {
        "type": "object", "required": ["inputs"],
        "properties": {"inputs": {"oneOf": [
                           {"type": "string"},
                           {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
                       "add_special_tokens": {"type": "boolean", "default": True}},
    },
    "TeiToken": {
        "type": "object", "required": ["id", "text", "special", "start", "stop"],
        "properties": {"id": {"type": "integer", "minimum": 0}, "text": {"type": "string"},
                       "special": {"type": "boolean"},
                       "start": {"type": ["integer", "null"], "minimum": 0},
                       "stop": {"type": ["integer", "null"], "minimum": 0}},
    },
    "TeiTokenizeResponse": {"type": "array",
                            "items": {"type": "array", "items": ref("TeiToken")}},
    # ---- llama.cpp ----
    "LlamaTokenizeRequest": {
        "type": "object", "required": ["content"],
        "properties": {"content": {"type": "string"},
                       "add_special": {"type": ["boolean", "null"], "default": False},
                       "parse_special": {"type": ["boolean", "null"], "default": True},
                       "with_pieces": {"type": ["boolean", "null"], "default": False}},
    },
    "LlamaTokenizeResponse": {
        "type": "object", "required": ["tokens"],
        "properties": {"tokens": {"type": "array", "items": {"oneOf": [
            {"type": "integer"},
            {"type": "object", "required": ["id", "piece"],
             "properties": {"id": {"type": "integer"}, "piece": {"type": "string"}}}]}}},
    },
    "LlamaDetokenizeRequest": {
        "type": "object", "required": ["tokens"],
        "properties": {"tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
    },
    "LlamaDetokenizeResponse": {"type": "object", "required": ["content"],
                                "properties": {"content": {"type": "string"}}},
    "LlamaEmbeddingRequest": {
        "type": "object",
        "description": "`content` (or `input`): as TEI's inputs.",
        "properties": {"content": ref("TeiInput"), "input": ref("TeiInput"),
                       "embd_normalize": {"type": ["integer", "null"], "minimum": -1,
                                          "maximum": 64, "default": 2}},
    },
    "LlamaEmbeddingResponse": {
        "type": "array",
        "items": {"type": "object", "required": ["index", "embedding"],
                  "properties": {"index": {"type": "integer"},
                                 "embedding": {"type": "array", "items": {
                                     "type": "array", "items": {"type": "number"}}}}}},
    # ---- rerank and classification (a served classifier) ----
    "TeiRerankRequest": {
        "type": "object", "required": ["query", "texts"],
        "description": "TEI's body (`texts`). Infinity's and Cohere's (`documents`) is "
                       "InfinityRerankRequest; a body with both is refused.",
        "properties": {
            "query": {"type": "string"},
            "texts": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "raw_scores": {"type": "boolean", "default": False,
                           "description": "the logit; else its sigmoid"},
            "return_text": {"type": "boolean", "default": False},
            "truncate": {"type": ["boolean", "null"]},
            "truncation_direction": ref("TruncationDirection"),
        },
    },
    "TeiRank": {
        "type": "object", "required": ["index", "score"],
        "properties": {"index": {"type": "integer", "minimum": 0}, "score": {"type": "number"},
                       "text": {"type": "string"}},
    },
    "TeiRerankResponse": {"type": "array", "items": ref("TeiRank"),
                          "description": "best first"},
    "TeiPredictRequest": {
        "type": "object", "required": ["inputs"],
        "properties": {
            "inputs": {"oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                {"type": "array", "minItems": 1, "items": {
                    "type": "array", "items": {"type": "string"}, "minItems": 1,
                    "maxItems": 2}}]},
            "raw_scores": {"type": "boolean", "default": False,
                           "description": "the logits; else softmax (sigmoid for one label)"},
            "truncate": {"type": ["boolean", "null"]},
            "truncation_direction": ref("TruncationDirection"),
        },
    },
    "Prediction": {
        "type": "object", "required": ["score", "label"],
        "properties": {"score": {"type": "number"}, "label": {"type": "string"}},
    },
    "Predictions": {"type": "array", "items": ref("Prediction"), "description": "best first"},
    "TeiPredictResponse": {"oneOf": [ref("Predictions"),
                                     {"type": "array", "items": ref("Predictions")}]},
    "Usage": {
        "type": "object", "required": ["prompt_tokens", "total_tokens"],
        "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}},
    },
    "InfinityRerankRequest": {
        "type": "object", "required": ["query", "documents"],
        "properties": {
            "query": {"type": "string"},
            "documents": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "return_documents": {"type": "boolean", "default": False},
            "raw_scores": {"type": "boolean", "default": False},
            "top_n": {"type": ["integer", "null"], "minimum": 1},
            "model": {"type": ["string", "null"]},
        },
    },
    "InfinityRerankResponse": {
        "type": "object", "required": ["object", "results", "model", "usage", "id", "created"],
        "properties": {
            "object": {"const": "rerank"},
            "results": {"type": "array", "items": {
                "type": "object", "required": ["relevance_score", "index"],
                "properties": {"relevance_score": {"type": "number"},
                               "index": {"type": "integer"}, "document": {"type": "string"}}}},
            "model": {"type": "string"}, "usage": ref("Usage"), "id": {"type": "string"},
            "created": {"type": "integer"},
        },
    },
    "InfinityClassifyRequest": {
        "type": "object", "required": ["input"],
        "properties": {"input": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                       "raw_scores": {"type": "boolean", "default": False},
                       "model": {"type": ["string", "null"]}},
    },
    "InfinityClassifyResponse": {
        "type": "object", "required": ["object", "data", "model", "usage", "id", "created"],
        "properties": {"object": {"const": "classify"},
                       "data": {"type": "array", "items": ref("Predictions")},
                       "model": {"type": "string"}, "usage": ref("Usage"),
                       "id": {"type": "string"}, "created": {"type": "integer"}},
    },
    "RerankRequest": {
        "type": "object", "required": ["query", "documents"],
        "description": "Cohere's, Jina's and vLLM's body.",
        "properties": {
            "model": {"type": ["string", "null"]},
            "query": {"type": "string"},
            "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [
                {"type": "string"},
                {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}]}},
            "top_n": {"type": ["integer", "null"], "minimum": 0,
                      "description": "the best this many; 0 or null: all (vLLM's default)"},
            "return_documents": {"type": "boolean", "default": True},
            "truncate": {"type": ["boolean", "null"]},
            "max_chunks_per_doc": {"description": "accepted and ignored"},
            "rank_fields": {"description": "accepted and ignored"},
            "user": {"description": "accepted and ignored"},
        },
    },
    "RerankResponse": {
        "type": "object", "required": ["id", "model", "results", "usage"],
        "properties": {
            "id": {"type": "string"}, "model": {"type": "string"}, "usage": ref("Usage"),
            "results": {"type": "array", "items": {
                "type": "object", "required": ["index", "relevance_score"],
                "properties": {"index": {"type": "integer"}, "relevance_score": {"type": "number"},
                               "document": {"type": "object", "required": ["text"],
                                            "properties": {"text": {"type": "string"}}}}}},
        },
    },
    "CohereEmbedRequest": {
        "type": "object",
        "description": "Cohere's embed body (v1 and v2). The vectors are unit vectors; "
                       "input_type picks the model's prompt of that kind where its "
                       "config_sentence_transformers.json has one (search_query: \"query\", "
                       "search_document: \"document\" or \"passage\", classification, "
                       "clustering), else its default prompt. " + QUANTIZATION,
        "properties": {
            "texts": {"type": ["array", "null"], "minItems": 1,
                      "items": {"type": "string", "minLength": 1}},
            "inputs": {"type": ["array", "null"], "minItems": 1,
                       "description": "v2 only, instead of texts: one text part per input",
                       "items": {"type": "object", "required": ["content"], "properties": {
                           "content": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
                               "type": "object", "required": ["type", "text"], "properties": {
                                   "type": {"const": "text"},
                                   "text": {"type": "string", "minLength": 1}}}}}}},
            "model": {"type": ["string", "null"]},
            "input_type": {"enum": ["search_document", "search_query", "classification",
                                    "clustering", None],
                           "description": "required on /v2/embed"},
            "embedding_types": {"type": ["array", "null"], "items": {
                "enum": ["float", "int8", "uint8", "binary", "ubinary", "base64"]},
                "description": "default (absent, null or empty): float"},
            "truncate": {"enum": ["END", "START", "NONE", None], "default": "END",
                         "description": "which end of a text longer than max_seq_length is "
                                        "cut; NONE: refused (422)"},
            "images": {"type": ["array", "null"], "maxItems": 0,
                       "description": "text models only: a non-empty list is refused (422)"},
            "output_dimension": {"type": ["integer", "null"], "minimum": 1,
                                 "description": "v2 only: the first this many values, "
                                                "renormalised (at most the model's width)"},
            "priority": {"type": ["integer", "null"],
                         "description": "v2 only: accepted; requests run in arrival order"},
        },
    },
    "CohereEmbedResponse": {
        "type": "object", "required": ["id", "embeddings", "texts", "meta", "response_type"],
        "properties": {
            "id": {"type": "string"},
            "response_type": {"enum": ["embeddings_floats", "embeddings_by_type"]},
            "embeddings": {"oneOf": [
                {"type": "array", "description": "v1 without embedding_types",
                 "items": {"type": "array", "items": {"type": "number"}}},
                {"type": "object", "description": "by type: each an array per text",
                 "properties": {
                     "float": {"type": "array", "items": {"type": "array",
                                                          "items": {"type": "number"}}},
                     "base64": {"type": "array", "items": {"type": "string"}},
                     **{t: {"type": "array", "items": {"type": "array", "items": {
                         "type": "integer", "minimum": lo, "maximum": lo + 255}}}
                        for t, lo in (("int8", -128), ("uint8", 0), ("binary", -128),
                                      ("ubinary", 0))}}}]},
            "texts": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "properties": {
                "api_version": {"type": "object", "properties": {"version": {"type": "string"}}},
                "billed_units": {"type": "object",
                                 "properties": {"input_tokens": {"type": "integer"}}}}},
        },
    },
    "ScoreRequest": {
        "type": "object", "required": ["text_1", "text_2"],
        "description": "vLLM's body: text_1 and text_2 paired 1:1, 1:N (text_1 one text) or N:N.",
        "properties": {
            "model": {"type": ["string", "null"]},
            "text_1": {"oneOf": [{"type": "string"},
                                 {"type": "array", "minItems": 1, "items": {"type": "string"}}]},
            "text_2": {"oneOf": [{"type": "string"},
                                 {"type": "array", "minItems": 1, "items": {"type": "string"}}]},
            "truncate_prompt_tokens": {
                "type": ["integer", "null"], "minimum": -1,
                "description": "null: longer pairs are refused (422); -1: cut to the model's "
                               "maximum; k: cut to k tokens, special tokens included, at least "
                               "the pair's special tokens and one token of each text and at "
                               "most the model's maximum (else 422)"},
            "use_activation": {"type": ["boolean", "null"],
                               "description": "false: the raw logit; default: its sigmoid"},
            "activation": {"type": ["boolean", "null"], "description": "use_activation's "
                           "deprecated name"},
            "softmax": {"type": ["boolean", "null"], "description": "use_activation's "
                        "deprecated name"},
            "priority": {"type": ["integer", "null"], "description": "0 only"},
            "mm_processor_kwargs": {"type": ["object", "null"],
                                    "description": "accepted and ignored"},
            "user": {"description": "accepted and ignored"},
        },
    },
    "ScoreResponse": {
        "type": "object", "required": ["id", "object", "created", "model", "data", "usage"],
        "properties": {
            "id": {"type": "string"}, "object": {"const": "list"},
            "created": {"type": "integer"}, "model": {"type": "string"},
            "data": {"type": "array", "items": {
                "type": "object", "required": ["index", "object", "score"],
                "properties": {"index": {"type": "integer"}, "object": {"const": "score"},
                               "score": {"type": "number"}}}},
            "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                      "properties": {"prompt_tokens": {"type": "integer"},
                                     "total_tokens": {"type": "integer"},
                                     "completion_tokens": {"type": "integer"}}},
        },
    },
    # ---- Infinity ----
    "Model": {
        "type": "object", "required": ["id", "object", "created", "owned_by"],
        "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                       "created": {"type": "integer"}, "owned_by": {"type": "string"}},
    },
    "ModelList": {
        "type": "object", "required": ["object", "data"],
        "properties": {"object": {"const": "list"},
                       "data": {"type": "array", "items": ref("Model")}},
    },
}


# What each status means on TEI's routes, and the error_types it comes with
# (server/api/errors.h): TEI's router answers Validation and Tokenizer 422 and
# Empty 400, as these routes do.
TEI_STATUSES = {
    400: ("a body of the wrong types or fields (Validation), or an empty input: an empty "
          "inputs, sentences, texts or ids, an empty array of token ids, or an empty string "
          "to /tokenize (Empty)", ["Validation", "Empty"]),
    401: ("a missing or invalid API key", ["Validation"]),
    413: ("the body is over max_body_bytes, or the request alone needs more than the request "
          "memory budget", ["Validation"]),
    415: ("Content-Type is not application/json", ["Validation"]),
    422: ("a well-formed but invalid value: too many inputs, a text too long with truncation "
           "off, dimensions out of range, an unknown prompt_name (Validation); a text the "
           "tokenizer cannot encode (Tokenizer)", ["Validation", "Tokenizer"]),
    424: ("the served model does not do this route's task, or its output is not finite",
          ["Backend"]),
    429: ("the queue is full; retry later", ["Overloaded"]),
    503: ("not ready or draining (Unhealthy), or the request memory budget is held by others "
          "(Overloaded); retry later", ["Unhealthy", "Overloaded"]),
    504: ("the deadline passed while queued", ["Backend"]),
}


def tei_error(status):
    """TEI's error shape as status answers it: its meaning, and its error_types
    (a schema of its own, TeiError<status>)."""
    if status == "default":
        return json_body(ref(TEI_ERROR), "any other error")
    return json_body(ref(TEI_ERROR + str(status)), TEI_STATUSES[status][0])


SCHEMAS.update({
    TEI_ERROR + str(status): {
        "description": "TEI's error shape with status %d: %s." % (status, what),
        "allOf": [ref(TEI_ERROR), {"properties": {"error_type": {"enum": types}}}]}
    for status, (what, types) in TEI_STATUSES.items()})


def errors(shape, *statuses):
    """The error answers a route gives, all in one shape."""
    if shape == TEI_ERROR:
        return {str(s): tei_error(s) for s in statuses + ("default",)}
    out = {str(s): json_body(ref(shape), "error") for s in statuses}
    out["default"] = json_body(ref(shape), "any other error")
    return out


def tei_or_openai_error(status):
    """A route that answers TEI's body in TEI's shape and another API's in
    OpenAI's."""
    tei = tei_error(status)["content"]["application/json"]["schema"]
    return json_body({"oneOf": [tei, ref(OPENAI_ERROR)]}, "error")


# Statuses every keyed POST can answer besides its own: a bad or missing key,
# a body too large or of the wrong type, a full queue or budget, a deadline.
POST_ERRORS = (400, 401, 413, 415, 422, 429, 503, 504)


# A route whose task the served model does not do (an embedding route on a
# classifier, a rerank route on an embedder) answers 424, as TEI does.
TASK_ERRORS = POST_ERRORS + (424,)


def post(summary, request, response, error_shape=OPENAI_ERROR, tag="attnserve", op=None,
         statuses=TASK_ERRORS, ndjson=False, example=None):
    body = {"required": True, "content": {"application/json": {"schema": request}}}
    if example is not None:  # the body /docs fills in for "Try it out"
        body["content"]["application/json"]["example"] = example
    responses = {"200": json_body(response)}
    if ndjson:  # "stream": true: one JSON value a line
        responses["200"]["content"]["application/x-ndjson"] = {"schema": {"oneOf": [
            ref("StreamedChunk"), ref("StreamedEnd"), ref("StreamedError")]}}
    responses.update(errors(error_shape, *statuses))
    return {"post": {"summary": summary, "operationId": op, "tags": [tag],
                     "requestBody": body, "responses": responses}}


def get(summary, responses, tag="attnserve", op=None, error_shape=OPENAI_ERROR, keyed=True):
    """keyed=False: a route open to all, keys configured or not (the route
    table's HTTP_AUTH_OPEN), which overrides the document's security."""
    responses = dict(responses)
    responses.setdefault("default", json_body(ref(error_shape), "any other error"))
    out = {"summary": summary, "operationId": op, "tags": [tag], "responses": responses}
    if not keyed:
        out["security"] = []
    return {"get": out}


HTML = {"description": "an HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}
TEXT = {"description": "Prometheus text",
        "content": {"text/plain": {"schema": {"type": "string"}}}}

TEI_TAG = "Text Embeddings Inference"

# Request bodies that the /docs page offers as they are: Swagger UI's own
# filling ("string" in every field, every option set) would be refused.
TEXT_EX = "The food was delicious and the waiter was friendly."
DOCS_EX = ["A man is eating pasta.", "The new movie is awesome.", "A man is eating food."]
OPENAI_EMBED_EX = {"input": TEXT_EX}
RERANK_EX = {"query": "A man is eating something.", "documents": DOCS_EX}
COHERE_EMBED_EX = {"texts": [TEXT_EX], "input_type": "search_document",
                   "embedding_types": ["float", "int8", "ubinary"]}
SCORE_EX = {"text_1": "A man is eating something.", "text_2": DOCS_EX}

PATHS = {
    "/health": get("Liveness: 200 while the process serves.",
                   {"200": json_body(ref("Status"))}, op="health", keyed=False),
    "/ready": get("Readiness: 200 once the model is loaded and while not draining.",
                  dict({"200": json_body(ref("Status"))}, **errors(OPENAI_ERROR, 503)),
                  op="ready", keyed=False),
    "/info": get("Version, backend, limits, memory, model, self-test and verification, with "
                 "TEI's fields beside them.",
                 dict({"200": json_body(ref("Info"))}, **errors(OPENAI_ERROR, 401, 503)),
                 op="info"),
    "/metrics": get("Prometheus metrics.", dict({"200": TEXT}, **errors(OPENAI_ERROR, 401)),
                    op="metrics"),
    "/openapi.json": get("This document.",
                         {"200": json_body({"type": "object"})}, op="openapi", keyed=False),
    "/docs": get("This document as a page you can send requests from (Swagger UI, served "
                 "by the service itself: no resource from outside it).",
                 {"200": HTML}, op="docs", keyed=False),
    "/docs/{file}": {"get": dict(
        get("A file of the /docs page: Swagger UI's script, stylesheet, icon and licence, "
            "and the script that starts it.",
            dict({"200": {"description": "the file",
                          "content": {"text/javascript": {"schema": {"type": "string"}},
                                      "text/css": {"schema": {"type": "string"}},
                                      "image/png": {"schema": {"type": "string",
                                                               "format": "binary"}},
                                      "text/plain": {"schema": {"type": "string"}}}}},
                 **errors(OPENAI_ERROR, 404)),
            op="docs_file", keyed=False)["get"],
        parameters=[{"name": "file", "in": "path", "required": True,
                     "schema": {"type": "string",
                                "enum": ["swagger-ui-bundle.js", "swagger-ui.css",
                                         "favicon-32x32.png", "docs.js", "LICENSE"]}}])},
    "/v1/attention": post("The attention operator on one sequence.", ref("AttentionRequest"),
                          ref("AttentionResponse"), op="attention", statuses=POST_ERRORS),
    "/v1/embeddings": post("OpenAI embeddings.", ref("OpenAIEmbeddingRequest"),
                           ref("OpenAIEmbeddingResponse"), tag="OpenAI",
                           op="openai_embeddings", ndjson=True, example=OPENAI_EMBED_EX),
    "/v1/models": get("OpenAI: every served model and its aliases (models, or model and "
                      "model_aliases).",
                      dict({"200": json_body(ref("ModelList"))}, **errors(OPENAI_ERROR, 401)),
                      tag="OpenAI", op="openai_models"),
    "/v1/models/{id}": {"get": dict(
        get("OpenAI: one model; a name neither served nor an alias is 404 model_not_found.",
            dict({"200": json_body(ref("Model"))}, **errors(OPENAI_ERROR, 401, 404)),
            tag="OpenAI", op="openai_model")["get"],
        parameters=[{"name": "id", "in": "path", "required": True,
                     "schema": {"type": "string"}}])},
    # Text Embeddings Inference
    "/embed": post("TEI: pooled embeddings.", ref("TeiEmbedRequest"), ref("TeiEmbedResponse"),
                   TEI_ERROR, tag=TEI_TAG, op="embed", ndjson=True,
                   example={"inputs": TEXT_EX}),
    "/": dict(
        get("TEI: health (as /ready).",
            dict({"200": json_body(ref("Status"))}, **errors(TEI_ERROR, 503)), tag=TEI_TAG,
            op="root_health", error_shape=TEI_ERROR, keyed=False),
        **post("TEI: the route of the served model's task: /embed for an embedding model, "
               "/rerank for a reranker (one label), /predict for another classifier.",
               {"oneOf": [ref("TeiEmbedRequest"), ref("TeiRerankRequest"),
                          ref("TeiPredictRequest")]},
               {"oneOf": [ref("TeiEmbedResponse"), ref("TeiRerankResponse"),
                          ref("TeiPredictResponse")]}, TEI_ERROR, tag=TEI_TAG, op="root_embed")),
    "/embed_all": post("TEI: every token's last hidden state, special tokens included.",
                       ref("TeiEmbedAllRequest"), ref("TeiEmbedAllResponse"), TEI_ERROR,
                       tag=TEI_TAG, op="embed_all"),
    "/invocations": post("SageMaker: as POST /.",
                         {"oneOf": [ref("TeiEmbedRequest"), ref("TeiRerankRequest"),
                                    ref("TeiPredictRequest")]},
                         {"oneOf": [ref("TeiEmbedResponse"), ref("TeiRerankResponse"),
                                    ref("TeiPredictResponse")]},
                         TEI_ERROR, tag=TEI_TAG, op="invocations"),
    "/rerank": {"post": {
        "summary": "Rerank texts against a query with the served reranker (a classifier with "
                   "one label): TEI's body (`texts`) answered and refused in TEI's shape, "
                   "Infinity's (`documents`) in Infinity's.",
        "operationId": "rerank", "tags": [TEI_TAG, "Infinity"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "oneOf": [ref("TeiRerankRequest"), ref("InfinityRerankRequest")]}}}},
        "responses": dict(
            {"200": json_body({"oneOf": [ref("TeiRerankResponse"),
                                         ref("InfinityRerankResponse")]})},
            **{str(st): tei_or_openai_error(st) for st in TASK_ERRORS + ("default",)}),
    }},
    "/predict": post("TEI: the served classifier's labels for a text, a pair or a batch of "
                     "either, best first.", ref("TeiPredictRequest"), ref("TeiPredictResponse"),
                     TEI_ERROR, tag=TEI_TAG, op="predict"),
    "/ping": get("SageMaker: health (as /ready).",
                 dict({"200": json_body(ref("Status"))}, **errors(TEI_ERROR, 503)), tag=TEI_TAG,
                 op="ping", error_shape=TEI_ERROR, keyed=False),
    "/similarity": post("TEI: cosine similarity of source_sentence with each sentence.",
                        ref("TeiSimilarityRequest"), ref("TeiSimilarityResponse"), TEI_ERROR,
                        tag=TEI_TAG, op="similarity",
                        example={"inputs": {"source_sentence": "A man is eating something.",
                                            "sentences": DOCS_EX}}),
    "/decode": post("TEI: token ids back to text (the WordPiece decoder).",
                    ref("TeiDecodeRequest"), ref("TeiDecodeResponse"), TEI_ERROR, tag=TEI_TAG,
                    op="decode"),
    "/tokenize": {"post": {
        "summary": "TEI's tokens with byte offsets for `inputs`; llama.cpp's ids for `content`.",
        "operationId": "tokenize", "tags": [TEI_TAG, "llama.cpp"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "oneOf": [ref("TeiTokenizeRequest"), ref("LlamaTokenizeRequest")]}}}},
        "responses": dict(
            {"200": json_body({"oneOf": [ref("TeiTokenizeResponse"),
                                         ref("LlamaTokenizeResponse")]})},
            **{str(st): tei_or_openai_error(st) for st in POST_ERRORS + ("default",)}),
    }},
    # Infinity
    "/embeddings": post("Infinity (and TEI): OpenAI embeddings.", ref("OpenAIEmbeddingRequest"),
                        ref("OpenAIEmbeddingResponse"), tag="Infinity",
                        op="infinity_embeddings", ndjson=True, example=OPENAI_EMBED_EX),
    "/classify": post("Infinity: the served classifier's labels for each text, best first.",
                      ref("InfinityClassifyRequest"), ref("InfinityClassifyResponse"),
                      tag="Infinity", op="classify"),
    "/v1/rerank": post("Cohere, Jina and vLLM: rerank documents against a query with the served "
                       "reranker.", ref("RerankRequest"), ref("RerankResponse"), tag="OpenAI",
                       op="v1_rerank", example=RERANK_EX),
    "/v2/rerank": post("vLLM: /v1/rerank under its Cohere v2 path.", ref("RerankRequest"),
                       ref("RerankResponse"), tag="OpenAI", op="v2_rerank", example=RERANK_EX),
    "/v1/embed": post("Cohere: embed texts (v1): a list of float vectors, or an object by "
                      "embedding type when embedding_types is given.",
                      ref("CohereEmbedRequest"), ref("CohereEmbedResponse"), tag="Cohere",
                      op="cohere_embed_v1", example=COHERE_EMBED_EX),
    "/v2/embed": post("Cohere: embed texts or inputs (v2; input_type required): an object by "
                      "embedding type.", ref("CohereEmbedRequest"), ref("CohereEmbedResponse"),
                      tag="Cohere", op="cohere_embed_v2", example=COHERE_EMBED_EX),
    "/score": post("vLLM: the served reranker's score of each pair of text_1 and text_2, in "
                   "input order.", ref("ScoreRequest"), ref("ScoreResponse"), tag="OpenAI",
                   op="score", example=SCORE_EX),
    "/v1/score": post("vLLM: /score under its /v1 path.", ref("ScoreRequest"),
                      ref("ScoreResponse"), tag="OpenAI", op="v1_score", example=SCORE_EX),
    "/models": get("Infinity: the model served.",
                   dict({"200": json_body(ref("ModelList"))}, **errors(OPENAI_ERROR, 401)),
                   tag="Infinity", op="infinity_models"),
    # llama.cpp
    "/embedding": post("llama.cpp: pooled embeddings, one list of one vector per input.",
                       ref("LlamaEmbeddingRequest"), ref("LlamaEmbeddingResponse"),
                       tag="llama.cpp", op="llama_embedding", example={"content": TEXT_EX}),
    "/detokenize": post("llama.cpp: token ids back to text.", ref("LlamaDetokenizeRequest"),
                        ref("LlamaDetokenizeResponse"), tag="llama.cpp", op="detokenize"),
}


def document():
    for path, item in PATHS.items():
        for op in item.values():
            if op.get("operationId") is None:
                op.pop("operationId", None)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "attnserve",
            "description": "Transformer encoder embeddings and the attention operator. Errors "
                           "come in the shape of the API each route imitates. Cohere's embed: "
                           + QUANTIZATION,
            # Replaced by the binary's own version when served.
            "version": "0",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # A key (Authorization: Bearer) on every route not marked open, once
        # keys are configured; none without them. /docs sends the one entered
        # under its Authorize button.
        "security": [{"bearer": []}, {}],
    }


def main():
    text = json.dumps(document(), indent=1, sort_keys=False) + "\n"
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        with open(OUT) as f:
            if f.read() != text:
                print("server/http/openapi.json is stale: run scripts/gen_openapi.py", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
