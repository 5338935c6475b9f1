/* usage: the tokens a provider says a response used, read from its body.
 *
 * Understands the `usage` object of OpenAI and Azure OpenAI (total_tokens,
 * else prompt_tokens + completion_tokens; the Responses API's input_tokens
 * / output_tokens / total_tokens) and of Anthropic (input_tokens +
 * cache_creation_input_tokens + output_tokens), at the top level or under
 * `response` / `message` (streaming events). A server-sent event stream
 * (`data: {...}` lines) is scanned event by event: the largest counts seen
 * win, since streaming usage is cumulative. Parsed with jansson; bodies
 * above USAGE_MAX_BODY are not parsed. Pure and thread-safe. */
#ifndef SLUICE_USAGE_H
#define SLUICE_USAGE_H

#include <stddef.h>

#define USAGE_MAX_BODY (16 * 1024 * 1024)

/* The tokens used, or -1 when the body reports none. */
long long usage_tokens(const char *body, size_t len);

#endif
