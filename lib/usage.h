/* usage: the tokens a provider says a response used, read from its body.
 *
 * Understands the `usage` object of OpenAI and Azure OpenAI (total_tokens,
 * else prompt_tokens + completion_tokens; the Responses API's input_tokens
 * / output_tokens / total_tokens) and of Anthropic (input_tokens +
 * cache_creation_input_tokens + cache_read_input_tokens + output_tokens),
 * at the top level or under
 * `response` / `message` (streaming events). A server-sent event stream
 * (`data: {...}` lines) is scanned event by event: the largest counts seen
 * win, since streaming usage is cumulative. Parsed with jansson; bodies
 * above USAGE_MAX_BODY are not parsed. Pure and thread-safe. */
#ifndef SLUICE_USAGE_H
#define SLUICE_USAGE_H

#include <stddef.h>

#include "usage_rec.h"

#define USAGE_MAX_BODY (16 * 1024 * 1024)

/* The usage split as the rate limits count it (usage_rec.h: input all of
 * the prompt, cache reads and writes included; tokens the combined count,
 * input + output or total_tokens when larger): 0 and *out when the body
 * reports usage, -1 (all fields -1) when not. */
int usage_split(const char *body, size_t len, usage_rec *out);

/* The combined tokens used (usage_split's tokens), or -1. */
long long usage_tokens(const char *body, size_t len);

#endif
