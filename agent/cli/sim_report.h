/* sim_report: what `sluice sim` prints for one simulated deployment: the
 * figures of a run (sim_result, filled by cmd_sim.c from the fleet's
 * records and the provider world's ledger) as a table or as JSON.
 *
 * Nothing here reads a clock or the environment: the same result prints
 * the same bytes, which is what "the same seed prints the same table"
 * rests on. Depends on jansson (the JSON form) and libc. */
#ifndef SLUICE_SIM_REPORT_H
#define SLUICE_SIM_REPORT_H

#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

#define SIM_REPORT_NAME_MAX 65

/* The waits (ms, from a request's arrival to its successful send) of the
 * requests of one lane or one tenant. */
typedef struct sim_wait_class {
    char name[SIM_REPORT_NAME_MAX];
    double *ms; /* owned; n of them */
    size_t n, cap;
} sim_wait_class;

typedef struct sim_result {
    char deployment[SIM_REPORT_NAME_MAX];
    const char *provider; /* the world's name: static */
    long long rpm, tpm, itpm, otpm;
    int agents;
    size_t offered;    /* requests */
    size_t completed;  /* answered 200 */
    size_t sends;      /* attempts that reached the provider */
    size_t throttled;  /* of which answered 429 */
    size_t shed;       /* attempts the governor shed (each retried after its hint) */
    size_t unfinished; /* requests neither completed nor given up when the run ended */
    size_t given_up;   /* requests out of attempts */
    double first_ms;   /* the first arrival */
    double makespan_ms, floor_ms;
    const char *binding; /* "requests", "tokens", "input tokens", "output tokens" */
    double utilisation;  /* of the binding dimension, 0..1 */
    double max10_ratio;  /* the largest 10 s window's charge / a 10 s share of the quota */
    sim_wait_class *lanes, *tenants;
    size_t nlanes, ntenants;
} sim_result;

/* Adds a wait to the class called name (created on first use). Returns 0
 * or -1 (out of memory). */
int sim_wait_add(sim_wait_class **classes, size_t *n, const char *name, double ms);

/* Frees the waits a result holds (not the result). NULL is a no-op. */
void sim_result_clear(sim_result *r);

/* The table of one deployment, on out. */
void sim_report_text(FILE *out, const sim_result *r);

/* The same figures as a JSON object (a new reference), or NULL. */
json_t *sim_report_json(const sim_result *r);

#endif
