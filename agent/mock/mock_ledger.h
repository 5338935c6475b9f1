/* mock_ledger: what the mock provider saw, counted per deployment and per
 * client.
 *
 * The hot path only increments counters and appends accept times; the JSON
 * view is built on demand (GET /stats, SIGUSR1, exit). Entries are created
 * on first use and never removed: a reset zeroes them in place, so pointers
 * handed out in a mock_ledger_ref stay valid until mock_ledger_free().
 * Depends on jansson for the JSON view. Single-threaded. */
#ifndef SLUICE_MOCK_LEDGER_H
#define SLUICE_MOCK_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef enum mock_outcome {
    MOCK_ACCEPTED,     /* 200 with a completion */
    MOCK_RATE_LIMITED, /* 429, request or token rate limit */
    MOCK_NO_QUOTA,     /* 429 insufficient_quota (--quota-exhausted) */
    MOCK_UNAVAILABLE,  /* 503 (Anthropic: 529) injected by --fail-503 */
    MOCK_BAD_REQUEST,  /* 400: malformed HTTP, bad JSON, bad fields */
    MOCK_NOT_FOUND,    /* 404: unknown path or deployment */
    MOCK_OTHER_ERROR,  /* 405, 413 */
    MOCK_NO_CREDIT,    /* 400 credit balance too low (--quota-exhausted, Anthropic) */
    MOCK_INJECTED_429  /* 429 from POST /control inject_429, nothing charged */
} mock_outcome;

typedef struct mock_counts {
    uint64_t requests;
    uint64_t accepted;
    uint64_t status_429;         /* every 429, insufficient_quota and injected included */
    uint64_t insufficient_quota; /* --quota-exhausted: part of status_429, or of status_400
                                    in Anthropic style */
    uint64_t status_503;
    uint64_t status_400;
    uint64_t status_404;
    uint64_t other_errors;
    uint64_t abandoned;       /* accepted, but the client left first */
    uint64_t tokens_charged;  /* estimates charged at admission */
    uint64_t tokens_reported; /* usage.total_tokens sent back */
    double first_accept_ms;   /* < 0 until the first accept */
    double last_accept_ms;
    uint64_t injected_429; /* the part of status_429 that /control injected */
} mock_counts;

/* What an accepted call charged at admission, per bucket, and reported. */
typedef struct mock_charge {
    uint64_t tokens;   /* the token bucket (TPM): the estimate; accept_tokens */
    uint64_t input;    /* the input-token bucket (ITPM); accept_input */
    uint64_t output;   /* the output-token bucket (OTPM): max_tokens; accept_output */
    uint64_t charged;  /* tokens_charged */
    uint64_t reported; /* tokens_reported: the usage sent back */
    uint64_t id;       /* the answer's request id (N of mock-N, req_mock_N); 0: the neighbour */
} mock_charge;

typedef struct mock_ledger mock_ledger;

/* Where one request was counted, for mock_ledger_abandoned(). */
typedef struct mock_ledger_ref {
    void *deployment;
    void *client;
    void *credential; /* set by mock_ledger_credential() */
} mock_ledger_ref;

/* A new empty ledger. Clients beyond max_clients are counted together
 * under "(other)" so a scan from many addresses cannot exhaust memory;
 * accept times beyond max_accepts per deployment are dropped (and the
 * deployment says "accepts_truncated": true). NULL on allocation failure. */
mock_ledger *mock_ledger_new(size_t max_clients, size_t max_accepts);

/* Frees the ledger. NULL is a no-op. */
void mock_ledger_free(mock_ledger *l);

/* Counts one request. deployment is NULL when the request never reached a
 * deployment (bad path, malformed HTTP); client must not be NULL. t_ms is
 * the time of the decision, ch what an accept charged (ignored otherwise;
 * NULL is all zero). ref (optional) receives where it was counted.
 * Returns 0, or -1 when an entry could not be allocated: the totals are
 * counted all the same. */
int mock_ledger_record(mock_ledger *l, const char *deployment, const char *client, mock_outcome o, double t_ms,
                       const mock_charge *ch, mock_ledger_ref *ref);

/* Counts the same request once more under the credential it carried (a
 * fingerprint, never the secret: see mock_credential_fingerprint() in
 * mock_internal.h), in the "credentials" map, and adds that entry to ref
 * (optional) so that an abandoned call is counted there too. Entries are
 * capped as clients are (beyond: "(other)"). Returns 0 or -1 (out of
 * memory: the request is then missing from that map only). */
int mock_ledger_credential(mock_ledger *l, const char *credential, mock_outcome o, double t_ms, const mock_charge *ch,
                           mock_ledger_ref *ref);

/* Lists a give-back of amount output tokens at t_ms in the deployment of
 * ref (output_refund_ms, output_refund), for the accept whose request id
 * is id (output_refund_id). */
void mock_ledger_refund(mock_ledger *l, const mock_ledger_ref *ref, double t_ms, uint64_t amount, uint64_t id);

/* The buckets an end-of-call correction applies to. */
typedef enum mock_adjust {
    MOCK_ADJUST_TOKENS, /* Bedrock: input + output x burndown against input + max_tokens */
    MOCK_ADJUST_OUTPUT, /* Anthropic's current rule: the output generated against 1 */
    MOCK_ADJUST_KINDS
} mock_adjust;

/* Lists a correction of amount tokens (signed: more charged, or given
 * back) of bucket kind at t_ms in the deployment of ref (<kind>_adjust_ms,
 * <kind>_adjust), for the accept whose request id is id
 * (<kind>_adjust_id), and adds it to tokens_charged wherever the call was
 * counted. */
void mock_ledger_adjust(mock_ledger *l, const mock_ledger_ref *ref, mock_adjust kind, double t_ms, int64_t amount,
                        uint64_t id);

/* Counts an accepted request whose response could not be delivered. */
void mock_ledger_abandoned(mock_ledger *l, const mock_ledger_ref *ref);

/* Zeroes every counter and forgets the accept times; now_ms becomes the
 * ledger's "since_ms". */
void mock_ledger_reset(mock_ledger *l, double now_ms);

/* Copies the totals. */
void mock_ledger_totals(const mock_ledger *l, mock_counts *out);

/* The counts of one deployment, or -1 when it has none. */
int mock_ledger_deployment(const mock_ledger *l, const char *deployment, mock_counts *out);

/* A new JSON object {"since_ms", "totals", "deployments", "clients",
 * "credentials"} (see
 * docs/mock.md). Entries without any request since the last reset are left
 * out. The caller owns the reference. NULL on allocation failure. */
json_t *mock_ledger_json(const mock_ledger *l);

#endif
