/* vocab: the words sluice speaks, one table per vocabulary, each an X-macro
 * as libuv's UV_ERRNO_MAP. The engine, the daemon and the library print and
 * parse these words from here only, and test_vocab checks that the Lua
 * scripts (lua/, every script) use exactly the same ones. docs/protocol.md lists
 * them for people. */
#ifndef SLUICE_VOCAB_H
#define SLUICE_VOCAB_H

#include "sluice.h"

/* Why a request was shed or deferred: X(NAME, "word", source), source
 * LUA when the reserve script says it, ENGINE when only the engine does
 * (it paces locally with the same words, minus the fleet-only ones).
 * "other" stands for a word this table does not know; it stays last. */
#define SLUICE_SHED_REASON_MAP(X)                                                                                      \
    X(RPM, "rpm", LUA)                                                                                                 \
    X(TPM, "tpm", LUA)                                                                                                 \
    X(PAUSED, "paused", LUA)                                                                                           \
    X(DAILY, "daily", LUA)                                                                                             \
    X(CONCURRENCY, "concurrency", LUA)                                                                                 \
    X(TOO_LARGE, "too_large", LUA)                                                                                     \
    X(LANE, "lane", LUA)                                                                                               \
    X(CEILING, "ceiling", LUA)                                                                                         \
    X(TENANT_DAILY, "tenant_daily", LUA)                                                                               \
    X(BREAKER, "breaker", LUA)                                                                                         \
    X(QUOTA, "quota", LUA)                                                                                             \
    X(TAG, "tag", ENGINE)                                                                                              \
    X(ITPM, "itpm", LUA)                                                                                               \
    X(OTPM, "otpm", LUA)                                                                                               \
    X(SHARE, "share", LUA)                                                                                             \
    X(BUDGET, "budget", ENGINE)                                                                                        \
    X(OTHER, "other", ENGINE)

/* How a call ended, as SETTLE and the settle script take it: X(NAME,
 * "word"), in the order of engine_outcome and of sluice.h's sl_outcome. */
#define SLUICE_OUTCOME_MAP(X)                                                                                          \
    X(OK, "ok")                                                                                                        \
    X(THROTTLED, "throttled")                                                                                          \
    X(FAILED, "failed")                                                                                                \
    X(CANCELLED, "cancelled")                                                                                          \
    X(QUOTA, "quota")

/* The kinds of a verdict of the reserve script: X(NAME, number). The
 * script builds every verdict with one constructor (lua/common.lua
 * sl_verdict, whose SL_SHED, SL_GRANT and SL_DEFER are these numbers);
 * lib/core/wire.c reads them (docs/redis-keys.md, "Verdicts"). */
#define SLUICE_VERDICT_MAP(X)                                                                                          \
    X(SHED, 0)                                                                                                         \
    X(GRANT, 1)                                                                                                        \
    X(DEFER, 2)

/* The dimensions of a deployment's budget, in the scripts' order
 * (lua/common.lua SL_DIMS): X(NAME, "name", 'letter', "limit field"),
 * the letter naming it in a settle's "what the headers said". */
#define SLUICE_DIM_MAP(X)                                                                                              \
    X(REQUESTS, "requests", 'r', "rpm")                                                                                \
    X(TOKENS, "tokens", 't', "tpm")                                                                                    \
    X(INPUT, "input", 'i', "itpm")                                                                                     \
    X(OUTPUT, "output", 'o', "otpm")

/* The markers among the scripts' arguments (lua/common.lua): X(NAME,
 * "text"). AGENT starts the first argument ("@<agent id>/<promise ms>",
 * a proof of life); TIMED last asks for the call's own time; DRY (before
 * TIMED) runs the reserve script without writing (ESTIMATE); EXACT
 * starts an estimate the caller counted exactly; PARTIAL one that leaves
 * part of the prompt out (it teaches the calibration nothing); GROUP and
 * FEEDBACK open the reserve script's group form and the settle script's
 * feedback form. */
#define SLUICE_ARG_MARKER_MAP(X)                                                                                       \
    X(AGENT, "@")                                                                                                      \
    X(TIMED, "@timed")                                                                                                 \
    X(DRY, "@dry")                                                                                                     \
    X(EXACT, "=")                                                                                                      \
    X(PARTIAL, "~")                                                                                                    \
    X(GROUP, "group")                                                                                                  \
    X(FEEDBACK, "feedback")

/* The largest amount a request may carry (TOKENS, INPUT, OUTPUT, MAXWAIT
 * on the wire; tokens, input_tokens, output_tokens, max_wait_ms in
 * libsluice): 10^15, in every mode, so a sum of two stays far from
 * overflow and both modes refuse the same requests. */
#define SLUICE_AMOUNT_MAX 1000000000000000LL

/* What a well-formed request can still be refused for, by the engine,
 * for this configuration (engine_acquire_req_error): X(NAME, "message").
 * sluiced replies "ERR <message> (deployment '<name>')" and libsluice
 * reads any of these back as SL_EINVAL, as embedded mode returns it. */
#define SLUICE_REQ_ERROR_MAP(X)                                                                                        \
    X(SPLIT_NEGATIVE, "INPUT and OUTPUT must be non-negative integers")                                                \
    X(SPLIT_SUM, "TOKENS must be INPUT + OUTPUT when all three are given")                                             \
    X(TOO_MANY, "TOKENS, INPUT, OUTPUT and MAXWAIT must be at most 10^15")                                             \
    X(BUDGET_ESTIMATE, "this request draws from a budget in money: give its estimate (INPUT and OUTPUT, or "           \
                       "TOKENS), which it reserves at its largest cost")                                               \
    X(SPLIT_NEEDED, "this deployment counts input and output tokens apart (itpm, otpm): give INPUT and OUTPUT, "       \
                    "not TOKENS")                                                                                      \
    X(SPLIT_NEEDED_GROUP, "a member of this group counts input and output tokens apart (itpm, otpm): give INPUT "      \
                          "and OUTPUT, not TOKENS")

enum {
#define SLUICE_REQ_ERROR_ENUM(name, msg) SLUICE_REQ_##name,
    SLUICE_REQ_ERROR_MAP(SLUICE_REQ_ERROR_ENUM)
#undef SLUICE_REQ_ERROR_ENUM
        SLUICE_REQ_NERRORS
};

/* The message of request error k (SLUICE_REQ_*). */
static inline const char *sluice_req_error(int k) {
    static const char *const msgs[] = {
#define SLUICE_REQ_ERROR_MSG(name, msg) msg,
        SLUICE_REQ_ERROR_MAP(SLUICE_REQ_ERROR_MSG)
#undef SLUICE_REQ_ERROR_MSG
    };
    return k >= 0 && k < SLUICE_REQ_NERRORS ? msgs[k] : "";
}

/* The first word of the daemon's error replies that are not plain ERR:
 * X(WORD, sl_errno), as the daemon writes them and the library reads
 * them back (docs/protocol.md, "Errors"). */
#define SLUICE_ERROR_WORD_MAP(X)                                                                                       \
    X(SHED, SL_ESHED)                                                                                                  \
    X(NORETRY, SL_ENORETRY)                                                                                            \
    X(CLOSING, SL_ECLOSING)                                                                                            \
    X(UNAVAIL, SL_EUNAVAIL)

/* The word for code, or "ERR" when it has none. */
static inline const char *sluice_error_word(int code) {
    switch (code) {
#define SLUICE_ERROR_WORD_CASE(word, value)                                                                            \
    case value: return #word;
        SLUICE_ERROR_WORD_MAP(SLUICE_ERROR_WORD_CASE)
#undef SLUICE_ERROR_WORD_CASE
    }
    return "ERR";
}

/* What a caller cut off by the agent's shutdown is told: the engine's
 * message, and the daemon's whole reply (its word is checked against the
 * table by test_vocab). */
#define SLUICE_MSG_CLOSING "the agent is shutting down"
#define SLUICE_REPLY_CLOSING "-CLOSING " SLUICE_MSG_CLOSING

#endif
