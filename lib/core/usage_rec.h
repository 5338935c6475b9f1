/* usage_rec: what a provider reported one call used, the one record every
 * layer passes around: the usage parsers (lib/usage.c, lib/usage_sse.c)
 * fill it, the daemon protocol (lib/dproto.c) and SETTLE (agent/commands.c)
 * carry it, libsluice's settle op (lib/gov.h) holds it, the engine and its
 * budgets (lib/core/engine.h, budget.h) charge it.
 *
 * The public API spells it sl_usage (lib/include/sluice.h, a versioned
 * struct without cache_write); the two are mapped only where sl_* functions
 * take or give one (lib/verdict.h: verdict_usage_read / verdict_usage_write).
 *
 * Header only; depends on nothing. */
#ifndef SLUICE_USAGE_REC_H
#define SLUICE_USAGE_REC_H

/* -1 where unknown. tokens is the combined usage (input + output, or a
 * provider's total when larger); input is all of the prompt, cache reads
 * and writes included (Anthropic's input_tokens +
 * cache_creation_input_tokens + cache_read_input_tokens, OpenAI's
 * prompt_tokens); cache_read is the part of it read from the provider's
 * prompt cache, cache_write the part written to it (priced apart by
 * budgets: 0 or -1 = none known). */
typedef struct usage_rec {
    long long tokens, input, output, cache_read;
    long long cache_write;
} usage_rec;

/* Nothing known. */
#define USAGE_REC_UNKNOWN ((usage_rec){-1, -1, -1, -1, -1})

#endif
