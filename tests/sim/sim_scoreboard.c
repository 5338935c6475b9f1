/* sim_scoreboard: the scoreboard's command (scoreboard.h). One line per
 * scenario and seed, then "N passed, M failed, X xfail, Y xpass". Exits
 * 1 when a scenario not marked expected-failure misses a bound, when an
 * expected failure passes on a seed its baseline does not record as
 * passing (strict), or when the simulator fails; 2 on a usage error.
 *
 *   sim_scoreboard                    every scenario on seeds 1..3
 *   sim_scoreboard --seeds 5          seeds 1..5
 *   sim_scoreboard --scenario NAME    one scenario
 *   sim_scoreboard --seed 17          one seed (to rerun a search's find)
 *   sim_scoreboard --search 1..200    the first seed on which a scenario
 *                                     fails, with the command to rerun it
 *   sim_scoreboard --list             the scenarios, their worlds, their
 *                                     expected failures
 *   sim_scoreboard --record FILE      write the expected failures' figures
 *                                     as the baseline (tests/sim/xfail_baseline.txt)
 *
 * An expected failure is judged against its recorded figures too
 * (--baseline FILE, default $SLUICE_SOURCE_DIR/tests/sim/xfail_baseline.txt
 * when that exists): a gap that grows (more 429s or failed calls, a wider
 * window, less of the floor: see worse_than()) prints XWORSE and fails the
 * run like a FAIL, so a change cannot make a known gap quietly worse. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_fixture.h"
#include "scoreboard.h"

typedef struct sb_cli {
    unsigned long long from, to; /* seeds */
    const char *scenario;
    const char *baseline, *record;
    int search, list, help;
} sb_cli;

/* ---- the expected failures' baseline ------------------------------------ */

/* One recorded figure set: "scenario seed pct429 failed floor_pct
 * window_x [pass]". "pass": the expected failure passed on that seed when
 * it was recorded (its bounds met there, missed on others). */
typedef struct sb_base {
    char name[64];
    unsigned long long seed;
    double pct429, floor_pct, window_x;
    int failed, passed;
} sb_base;

typedef struct sb_baseline {
    sb_base *v;
    size_t n;
} sb_baseline;

/* Reads path ('#' comments and blank lines skipped). Returns 0, -1 on a
 * line it cannot read (file and line said on stderr), 1 when there is no
 * such file. */
static int baseline_load(const char *path, sb_baseline *b) {
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    char line[256];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        sb_base e;
        char mark[16] = "";
        int got = sscanf(line, "%63s %llu %lf %d %lf %lf %15s", e.name, &e.seed, &e.pct429, &e.failed, &e.floor_pct,
                         &e.window_x, mark);
        if (got < 6 || (got == 7 && strcmp(mark, "pass") != 0)) {
            fprintf(stderr, "sim_scoreboard: %s:%d: want \"scenario seed pct429 failed floor_pct window_x [pass]\"\n",
                    path, lineno);
            rc = -1;
            break;
        }
        e.passed = got == 7;
        sb_base *nv = realloc(b->v, (b->n + 1) * sizeof(*nv));
        if (!nv) {
            rc = -1;
            break;
        }
        b->v = nv;
        b->v[b->n++] = e;
    }
    fclose(f);
    return rc;
}

static const sb_base *baseline_find(const sb_baseline *b, const char *name, unsigned long long seed) {
    for (size_t i = 0; i < b->n; i++)
        if (b->v[i].seed == seed && strcmp(b->v[i].name, name) == 0) return &b->v[i];
    return NULL;
}

static double pct429(const sb_result *r) {
    return r->attempts ? 100.0 * (double)r->throttled / (double)r->attempts : 0;
}

/* Whether r is worse than its recorded figures, beyond what a harmless
 * change moves them (the simulator is exact: the same code gives the same
 * figures, so the margins are for changes elsewhere that shift timing):
 * 429s up by over 1 point, failed calls by over 2 and 10 %, the window up
 * by over 0.05x, or, where the floor share was not above 100 % (above it
 * the window says more), the share down by over 3 points. Says which in
 * why. */
static int worse_than(const sb_result *r, const sb_base *b, char *why, size_t n) {
    if (pct429(r) > b->pct429 + 1.0) snprintf(why, n, "429s %.2f %% against %.2f %% recorded", pct429(r), b->pct429);
    else if (r->failed > b->failed + 2 && r->failed > b->failed * 11 / 10)
        snprintf(why, n, "failed %d against %d recorded", r->failed, b->failed);
    else if (r->window_x > b->window_x + 0.05)
        snprintf(why, n, "window %.3fx against %.3fx recorded", r->window_x, b->window_x);
    else if (b->floor_pct <= 100.0 && r->floor_pct < b->floor_pct - 3.0)
        snprintf(why, n, "%.1f %% of the floor against %.1f %% recorded", r->floor_pct, b->floor_pct);
    else return 0;
    return 1;
}

static int opt_seeds(sb_cli *c, const char *v) {
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n < 1) return -1;
    c->from = 1, c->to = n;
    return 0;
}
static int opt_seed(sb_cli *c, const char *v) {
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end) return -1;
    c->from = c->to = n;
    return 0;
}
static int opt_scenario(sb_cli *c, const char *v) {
    c->scenario = v;
    return 0;
}
static int opt_search(sb_cli *c, const char *v) {
    if (sscanf(v, "%llu..%llu", &c->from, &c->to) != 2 || c->to < c->from) return -1;
    c->search = 1;
    return 0;
}
static int opt_baseline(sb_cli *c, const char *v) {
    c->baseline = v;
    return 0;
}
static int opt_record(sb_cli *c, const char *v) {
    c->record = v;
    return 0;
}
static int opt_list(sb_cli *c, const char *v) {
    (void)v;
    c->list = 1;
    return 0;
}
static int opt_help(sb_cli *c, const char *v) {
    (void)v;
    c->help = 1;
    return 0;
}

static const struct {
    const char *flag, *arg, *help;
    int (*apply)(sb_cli *c, const char *v);
} opts[] = {
    {"--seeds", "N", "seeds 1..N (default 3)", opt_seeds},
    {"--seed", "S", "one seed", opt_seed},
    {"--scenario", "NAME", "one scenario (default every one)", opt_scenario},
    {"--search", "FROM..TO", "print the first seed on which a scenario fails, and how to rerun it", opt_search},
    {"--list", NULL, "list the scenarios, their worlds and expected failures", opt_list},
    {"--baseline", "FILE", "the expected failures' recorded figures (default tests/sim/xfail_baseline.txt)",
     opt_baseline},
    {"--record", "FILE", "write the expected failures' figures of this run to FILE", opt_record},
    {"--help", NULL, "this text", opt_help},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: sim_scoreboard [options]\n");
    for (size_t i = 0; i < NOPTS; i++) {
        char flag[40];
        snprintf(flag, sizeof(flag), "%s%s%s", opts[i].flag, opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
        fprintf(out, "  %-22s %s\n", flag, opts[i].help);
    }
}

static double real_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    sb_cli c = {.from = 1, .to = 3};
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        while (k < NOPTS && strcmp(argv[i], opts[k].flag) != 0) k++;
        if (k == NOPTS || (opts[k].arg && i + 1 >= argc)) {
            fprintf(stderr, "sim_scoreboard: unknown option or missing value: %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        const char *v = opts[k].arg ? argv[++i] : NULL;
        if (opts[k].apply(&c, v) != 0) {
            fprintf(stderr, "sim_scoreboard: bad value for %s: %s\n", opts[k].flag, v);
            return 2;
        }
    }
    if (c.help) {
        usage(stdout);
        return 0;
    }
    if (c.scenario && !sb_find(c.scenario)) {
        fprintf(stderr, "sim_scoreboard: no scenario %s (--list)\n", c.scenario);
        return 2;
    }
    if (c.list) {
        for (size_t i = 0; i < sb_count(); i++) {
            const sb_scenario *s = sb_at(i);
            printf("%-26s world %-26s %s%s%s\n", sb_name(s), sb_world(s), sb_what(s), sb_xfail(s) ? "; XFAIL: " : "",
                   sb_xfail(s) ? sb_xfail(s) : "");
        }
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    sb_baseline base = {NULL, 0};
    char base_path[4096] = "";
    if (c.baseline) snprintf(base_path, sizeof(base_path), "%s", c.baseline);
    else if (getenv("SLUICE_SOURCE_DIR"))
        snprintf(base_path, sizeof(base_path), "%s/tests/sim/xfail_baseline.txt", getenv("SLUICE_SOURCE_DIR"));
    if (base_path[0] && !c.record) {
        int rc = baseline_load(base_path, &base);
        if (rc < 0 || (rc > 0 && c.baseline)) {
            if (rc > 0) fprintf(stderr, "sim_scoreboard: %s: cannot open\n", base_path);
            free(base.v);
            return 2;
        }
    }
    FILE *rec = NULL;
    if (c.record) {
        rec = fopen(c.record, "w");
        if (!rec) {
            fprintf(stderr, "sim_scoreboard: %s: cannot write\n", c.record);
            return 2;
        }
        fprintf(rec, "# The expected failures' figures (sim_scoreboard --record): scenario seed\n"
                     "# pct429 failed floor_pct window_x [pass]. A run worse than these beyond the\n"
                     "# margins of worse_than() (tests/sim/sim_scoreboard.c) prints XWORSE;\n"
                     "# \"pass\": the expected failure passed on that seed (a known XPASS).\n");
    }
    redis_fixture fx;
    if (redis_fixture_start(&fx, 0) != 0) return 1;
    double t0 = real_s();
    int passed = 0, failed = 0, xfail = 0, xpass = 0, xpass_known = 0, errors = 0;
    for (unsigned long long seed = c.from; seed <= c.to; seed++) {
        int failed_here = 0;
        for (size_t i = 0; i < sb_count(); i++) {
            const sb_scenario *s = sb_at(i);
            if (c.scenario && strcmp(sb_name(s), c.scenario) != 0) continue;
            sb_result r;
            char line[1024];
            if (sb_run(s, seed, &fx, &r) != 0) {
                printf("%-26s seed %-3llu ERROR (the simulator failed)\n", sb_name(s), seed);
                errors++;
                failed_here = 1;
                continue;
            }
            const sb_base *was = baseline_find(&base, sb_name(s), seed);
            const sb_base *b = strcmp(r.verdict, "XFAIL") == 0 ? was : NULL;
            /* A pass of an expected failure on a seed recorded as passing
             * is known: it does not fail the run (a new one does). */
            const sb_base *known = strcmp(r.verdict, "XPASS") == 0 && was && was->passed ? was : NULL;
            char worse[128];
            if (b && worse_than(&r, b, worse, sizeof(worse))) {
                r.verdict = "XWORSE";
                snprintf(r.why, sizeof(r.why), "worse than recorded: %s", worse);
                r.missed = 1;
            }
            if (rec && (strcmp(r.verdict, "XFAIL") == 0 || strcmp(r.verdict, "XPASS") == 0))
                fprintf(rec, "%s %llu %.2f %d %.1f %.3f%s\n", sb_name(s), seed, pct429(&r), r.failed, r.floor_pct,
                        r.window_x, strcmp(r.verdict, "XPASS") == 0 ? " pass" : "");
            sb_format(s, &r, line, sizeof(line));
            if (!c.search || strcmp(r.verdict, "FAIL") == 0) printf("%s\n", line);
            if (strcmp(r.verdict, "PASS") == 0) passed++;
            if (strcmp(r.verdict, "FAIL") == 0 || strcmp(r.verdict, "XWORSE") == 0) failed++, failed_here = 1;
            if (strcmp(r.verdict, "XFAIL") == 0) xfail++;
            /* --record writes each XPASS as known (" pass"). */
            if (strcmp(r.verdict, "XPASS") == 0) xpass++, xpass_known += known != NULL || rec != NULL;
            if (c.search && failed_here) {
                printf("first failing seed: %llu (%s); rerun: sim_scoreboard --scenario %s --seed %llu\n", seed,
                       sb_name(s), sb_name(s), seed);
                break;
            }
        }
        if (c.search && failed_here) break;
    }
    double took = real_s() - t0;
    redis_fixture_stop(&fx);
    free(base.v);
    if (rec && fclose(rec) != 0) {
        fprintf(stderr, "sim_scoreboard: %s: write failed\n", c.record);
        return 1;
    }
    if (c.search && !failed && !errors) printf("no failing seed in %llu..%llu\n", c.from, c.to);
    printf("%d passed, %d failed, %d xfail, %d xpass (%d recorded)%s (%.1f s real)\n", passed, failed + errors, xfail,
           xpass, xpass_known, c.search ? " (search: expected failures not judged as failing)" : "", took);
    return failed || errors || (!c.search && xpass > xpass_known) ? 1 : 0;
}
