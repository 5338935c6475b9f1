/* mock_responses: the Responses API routes of the mock provider (OpenAI
 * POST /v1/responses and /openai/v1/responses; Azure POST
 * /openai/responses?api-version=V and /openai/deployments/<name>/responses,
 * the path sluice's proxy forwards an Azure deployment's Responses call
 * to): the body checks, the prompt tokens of "instructions" and "input",
 * and the answer, a Response object or its stream of events as OpenAI
 * documents them (docs/mock.md, "Responses API"). Admission is the front
 * door's of mock_openai.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

/* Adds the tokens (mock_text_milli) of a content value (a string, or an array of parts
 * whose string "text" counts; other parts, images and files, count none)
 * to *n. -1 when it is neither, or a part is not an object or has a "text"
 * that is not a string. */
static int content_milli(const mock *m, json_t *content, long long *n) {
    size_t i;
    json_t *part;
    if (json_is_string(content)) {
        *n += mock_text_milli(m, json_string_value(content));
        return 0;
    }
    if (!json_is_array(content)) return -1;
    json_array_foreach(content, i, part) {
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || (text && !json_is_string(text))) return -1;
        if (text) *n += mock_text_milli(m, json_string_value(text));
    }
    return 0;
}

/* The tokens (mock_text_milli) of "input": a string, or an array of items (objects):
 * a message's "content" and a tool output's "output" string count; items
 * without either (function calls, reasoning) count none. -1 when malformed,
 * with the offending index in *bad (-1: input itself). */
static long long input_milli(const mock *m, json_t *input, long *bad) {
    size_t i;
    json_t *item;
    long long n = 0;
    *bad = -1;
    if (json_is_string(input)) return mock_text_milli(m, json_string_value(input));
    if (!json_is_array(input)) return -1;
    json_array_foreach(input, i, item) {
        json_t *content = json_object_get(item, "content"), *output = json_object_get(item, "output");
        *bad = (long)i;
        if (!json_is_object(item)) return -1;
        if (content && content_milli(m, content, &n) != 0) return -1;
        if (json_is_string(output)) n += mock_text_milli(m, json_string_value(output));
    }
    *bad = -1;
    return n;
}

/* What the answer says about one call, for its body and its events. */
typedef struct resp_answer {
    mock *m;
    const char *model;
    const char *instructions; /* NULL: null */
    long long max_output;     /* -1: not given (null) */
    uint64_t input, cached, output;
    int incomplete; /* the output used all of max_output_tokens */
    char id[48], msg_id[48];
    json_int_t created;
} resp_answer;

static json_t *usage_json(const resp_answer *a) {
    return json_pack("{sIs{sI}sIs{sI}sI}", "input_tokens", (json_int_t)a->input, "input_tokens_details",
                     "cached_tokens", (json_int_t)a->cached, "output_tokens", (json_int_t)a->output,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)0, "total_tokens",
                     (json_int_t)(a->input + a->output));
}

/* The output_text part with text (the whole answer, or "" while it is
 * being streamed). */
static json_t *text_part(const char *text) {
    return json_pack("{sssss[]}", "type", "output_text", "text", text, "annotations");
}

/* The assistant's message item: in progress and empty, or completed with
 * the text. */
static json_t *message_item(const resp_answer *a, const char *text) {
    return json_pack("{sssssssss[o*]}", "id", a->msg_id, "type", "message", "status",
                     text ? (a->incomplete ? "incomplete" : "completed") : "in_progress", "role", "assistant",
                     "content", text ? text_part(text) : NULL);
}

/* The Response object: in progress (text NULL: no output, usage null) or
 * done, with the message and the usage. */
static json_t *response_json(const resp_answer *a, const char *text) {
    const char *status = !text ? "in_progress" : a->incomplete ? "incomplete" : "completed";
    json_t *r = json_pack("{sssssIsssnsosososssosn}", "id", a->id, "object", "response", "created_at", a->created,
                          "status", status, "error", "incomplete_details",
                          text && a->incomplete ? json_pack("{ss}", "reason", "max_output_tokens") : json_null(),
                          "instructions", a->instructions ? json_string(a->instructions) : json_null(),
                          "max_output_tokens", a->max_output >= 0 ? json_integer(a->max_output) : json_null(), "model",
                          a->model, "output", text ? json_pack("[o]", message_item(a, text)) : json_array(), "usage");
    if (r && text) json_object_set_new(r, "usage", usage_json(a));
    return r;
}

/* One event: "type" and "sequence_number" and the fields of rest (an
 * object, consumed). */
static void event_add(mock_events *e, const char *type, json_t *rest, uint32_t generated) {
    json_t *j = rest ? json_pack("{sssI}", "type", type, "sequence_number", (json_int_t)e->n) : NULL;
    if (j && json_object_update(j, rest) != 0) {
        json_decref(j);
        j = NULL;
    }
    json_decref(rest);
    mock_events_add(e, type, j, NULL, generated);
}

/* The events of a streamed Response, as OpenAI documents them: created,
 * in_progress, the message item and its text part added, the text in
 * deltas, the text, part and item done, then completed (or incomplete)
 * with the whole Response and its usage. */
static void response_events(mock_events *e, const resp_answer *a) {
    uint64_t cum[MOCK_STREAM_DELTAS], done = 0;
    size_t k;
    char *text = mock_words(0, a->output);
    uint32_t out = (uint32_t)a->output;
    if (!text) {
        e->oom = 1;
        return;
    }
    event_add(e, "response.created", json_pack("{so}", "response", response_json(a, NULL)), 0);
    event_add(e, "response.in_progress", json_pack("{so}", "response", response_json(a, NULL)), 0);
    event_add(e, "response.output_item.added", json_pack("{siso}", "output_index", 0, "item", message_item(a, NULL)),
              0);
    event_add(
        e, "response.content_part.added",
        json_pack("{sssisiso}", "item_id", a->msg_id, "output_index", 0, "content_index", 0, "part", text_part("")), 0);
    mock_stream_split(a->output, cum, &k);
    for (size_t i = 0; i < k; i++) {
        char *delta = mock_words(done, cum[i] - done);
        event_add(
            e, "response.output_text.delta",
            delta ? json_pack("{sssisiss}", "item_id", a->msg_id, "output_index", 0, "content_index", 0, "delta", delta)
                  : NULL,
            (uint32_t)cum[i]);
        free(delta);
        done = cum[i];
    }
    event_add(e, "response.output_text.done",
              json_pack("{sssisiss}", "item_id", a->msg_id, "output_index", 0, "content_index", 0, "text", text), out);
    event_add(
        e, "response.content_part.done",
        json_pack("{sssisiso}", "item_id", a->msg_id, "output_index", 0, "content_index", 0, "part", text_part(text)),
        out);
    event_add(e, "response.output_item.done", json_pack("{siso}", "output_index", 0, "item", message_item(a, text)),
              out);
    event_add(e, a->incomplete ? "response.incomplete" : "response.completed",
              json_pack("{so}", "response", response_json(a, text)), out);
    free(text);
}

/* The body-dependent part of every Responses route (see chat() in
 * mock_openai.c for where the deployment comes from). */
static void responses(mock_call *c, const char *deployment) {
    mock *m = c->m;
    char name[MOCK_NAME_MAX + 1];
    json_t *body = mock_oai_body(c, deployment, name, sizeof(name));
    if (!body) return;
    json_t *input = json_object_get(body, "input"), *ins = json_object_get(body, "instructions");
    json_t *mt = json_object_get(body, "max_output_tokens"), *stream = json_object_get(body, "stream");
    long bad_item = -1;
    int missing = !input || json_is_null(input), mt_given = mt && !json_is_null(mt);
    long long points = missing ? -1 : input_milli(m, input, &bad_item);
    int ins_bad = ins && !json_is_null(ins) && !json_is_string(ins);
    int has_ins = json_is_string(ins);
    if (has_ins && points >= 0) points += mock_text_milli(m, json_string_value(ins));
    long long max_output = -1;
    if (mt_given) max_output = json_is_integer(mt) ? json_integer_value(mt) : 0;
    int stream_bad = stream && !json_is_null(stream) && !json_is_boolean(stream);
    int streaming = json_is_true(stream);
    /* The instructions are echoed in the answer: keep them past the body
     * (out of memory, the answer says null). */
    char *ins_copy = has_ins ? strdup(json_string_value(ins)) : NULL;
    json_decref(body);
    if (missing) {
        free(ins_copy);
        mock_oai_bad_request(c, "input", "Missing required parameter: 'input'.");
        return;
    }
    if (points < 0) {
        free(ins_copy);
        if (bad_item >= 0)
            mock_oai_bad_request(c, "input",
                                 "Invalid 'input[%ld]': an item must be an object whose 'content' is a "
                                 "string or an array of content parts.",
                                 bad_item);
        else mock_oai_bad_request(c, "input", "Invalid 'input': expected a string or an array of input items.");
        return;
    }
    if (ins_bad) {
        free(ins_copy);
        mock_oai_bad_request(c, "instructions", "Invalid 'instructions': expected a string.");
        return;
    }
    if (mt_given && (max_output < 1 || max_output > MOCK_MAX_TOKENS)) {
        free(ins_copy);
        mock_oai_bad_request(c, "max_output_tokens", "'max_output_tokens' must be an integer between 1 and %d.",
                             MOCK_MAX_TOKENS);
        return;
    }
    if (stream_bad) {
        free(ins_copy);
        mock_oai_bad_request(c, "stream", "'stream' must be a boolean.");
        return;
    }
    uint64_t limit = max_output > 0 ? (uint64_t)max_output : MOCK_DEFAULT_MAX_TOKENS;
    uint64_t prompt = mock_tokens(points), charge = mock_oai_charge(c, prompt, limit);
    if (mock_oai_admit(c, charge) != 0) {
        free(ins_copy);
        return;
    }
    resp_answer a = {.m = m,
                     .model = name,
                     .instructions = ins_copy,
                     .max_output = max_output,
                     .input = prompt,
                     .cached = m->opt.cache_read_tokens < prompt ? m->opt.cache_read_tokens : prompt,
                     .created = (json_int_t)time(NULL)};
    a.output = mock_draw_output(m, limit);
    a.incomplete = a.output >= limit;
    snprintf(a.id, sizeof(a.id), "resp_mock_%llu", (unsigned long long)m->next_id + 1);
    snprintf(a.msg_id, sizeof(a.msg_id), "msg_mock_%llu", (unsigned long long)m->next_id + 1);
    uint64_t service = mock_rng_range(m->rng, m->opt.service_ms_min, m->opt.service_ms_max);
    mock_charge ch = {.tokens = charge, .charged = charge, .reported = prompt + a.output};
    if (streaming) {
        mock_events e = {0};
        response_events(&e, &a);
        free(ins_copy);
        mock_call_finish_stream(c, &e, &ch, m->opt.slow_ms, service);
        return;
    }
    char *text = mock_words(0, a.output);
    json_t *r = text ? response_json(&a, text) : NULL;
    free(text);
    free(ins_copy);
    mock_call_finish(c, 200, MOCK_ACCEPTED, r, &ch, service + m->opt.slow_ms);
}

void mock_route_azure_responses(mock_call *c, const char *name) {
    mock_oai_style(c, MOCK_AZURE, "Responses_Create");
    responses(c, name);
}

void mock_route_azure_responses_v(mock_call *c, const char *name) {
    (void)name;
    mock_oai_style(c, MOCK_AZURE, "Responses_Create");
    responses(c, NULL);
}

void mock_route_openai_responses(mock_call *c, const char *name) {
    (void)name;
    mock_oai_style(c, MOCK_OPENAI, "Responses_Create");
    responses(c, NULL);
}
