/* demo_report: one row of the demo's table per strategy, computed from
 * what the workers said and what the provider's ledger (the mock's
 * /stats) counted, and printed as the seed's table or as JSON.
 *
 * Provenance of each column: completed, 429s and attempts are the
 * provider's own ledger; gave up, p50, p99 and wall are the clients'
 * (the provider cannot know them); effective RPM is provider-completed
 * per client wall minute; util is provider-side only:
 *   util = ((completed - burst) / rate) / (last accept - first accept)
 * the share of the quota's rate used beyond the initial burst between the
 * provider's first and last accepted request. For a run that completes all
 * N requests this is floor / makespan with floor = (N - burst) / rate.
 * When the deployment has a TPM and tokens bind first (their floor,
 * (tokens charged - token burst) / token rate, is the longer), util is
 * counted in tokens the same way:
 *   util = ((tokens charged - token burst) / token rate) / (last - first accept)
 * with the tokens charged from the provider's ledger too.
 * Depends on jansson. */
#ifndef SLUICE_DEMO_REPORT_H
#define SLUICE_DEMO_REPORT_H

#include <stdio.h>

#include <jansson.h>

#include "demo.h"

/* The demo's parameters, as the report shows them. */
typedef struct demo_setup {
    const char *scenario; /* demo_scenario's name */
    int processes;
    long long requests;
    double rpm;
    double burst;
    double tpm, token_burst; /* tpm 0: no token limit */
    long long prompt_chars, max_tokens;
    double tokens; /* what the N requests are charged, the sum of their estimates */
    int agents;    /* sluiced processes (0: none started) */
    double service_min_ms, service_max_ms;
    int attempts;
    double time_scale;
    long long jitter_ms; /* sluiced's jitter_ms */
    const char *redis;   /* "ephemeral" or the URL given */
} demo_setup;

typedef struct demo_row {
    const demo_strategy *st;
    const char *deployment;
    int ok;          /* the run finished and its ledger was read */
    char error[160]; /* why not */
    /* the provider's ledger for the run's deployment */
    long long p_requests, p_accepted, p_429, p_other, p_abandoned, p_tokens;
    double p_first_accept_ms, p_last_accept_ms; /* < 0: none */
    /* the clients' totals, summed over the processes */
    long long c_completed, c_gave_up, c_attempts, c_429, c_http_errors, c_transport_errors;
    long long c_sheds, c_retry_denied, c_sluice_errors, c_settle_errors;
    double wall_ms;     /* go until the last request finished (any outcome) */
    double *latency_ms; /* completed requests, sorted after demo_row_finish */
    size_t nlat, caplat;
    /* derived by demo_row_finish */
    double p50_ms, p99_ms, eff_rpm, util; /* util < 0: not defined */
} demo_row;

/* Adds one worker's "result" document. Returns 0, or -1 if malformed or
 * out of memory. */
int demo_row_add_worker(demo_row *row, const json_t *result);

/* Reads the run's deployment from the ledger (/stats JSON). A deployment
 * the ledger never saw counts as all zeros. Returns 0, or -1 if the
 * document is malformed. */
int demo_row_add_ledger(demo_row *row, const json_t *stats);

/* Sorts the latencies and computes the derived columns. */
void demo_row_finish(demo_row *row, const demo_setup *s);

void demo_row_free(demo_row *row);

/* The floor in ms: the longer of (N - burst) / rate and, with a TPM,
 * (tokens - token burst) / token rate (0 when all fits in the bursts). */
double demo_floor_ms(const demo_setup *s);

/* 1 when tokens bind first: the token floor is the longer one. */
int demo_tokens_bind(const demo_setup *s);

/* Text: a header, the rows, and how to read them. */
void demo_report_header(FILE *f, const demo_setup *s);
void demo_report_columns(FILE *f);
void demo_report_row(FILE *f, const demo_row *row);
void demo_report_footer(FILE *f, const demo_setup *s);

/* The whole report as one JSON document (new reference, NULL on OOM). */
json_t *demo_report_json(const demo_setup *s, const demo_row *rows, int nrows);

#endif
