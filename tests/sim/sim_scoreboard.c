/* sim_scoreboard: the scoreboard's command (scoreboard.h). One line per
 * scenario and seed, then "N passed, M failed, X xfail, Y xpass". Exits
 * 1 when a scenario not marked expected-failure misses a bound, when an
 * expected failure passes (strict), or when the simulator fails; 2 on a
 * usage error.
 *
 *   sim_scoreboard                    every scenario on seeds 1..3
 *   sim_scoreboard --seeds 5          seeds 1..5
 *   sim_scoreboard --scenario NAME    one scenario
 *   sim_scoreboard --seed 17          one seed (to rerun a search's find)
 *   sim_scoreboard --search 1..200    the first seed on which a scenario
 *                                     fails, with the command to rerun it
 *   sim_scoreboard --list             the scenarios, their worlds, their
 *                                     expected failures */
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
    int search, list, help;
} sb_cli;

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
    {"--help", NULL, "this text", opt_help},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: sim_scoreboard [options]\n");
    for (size_t i = 0; i < NOPTS; i++) {
        char flag[40];
        snprintf(flag, sizeof(flag), "%s%s%s", opts[i].flag, opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
        fprintf(out, "  %-20s %s\n", flag, opts[i].help);
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
    redis_fixture fx;
    if (redis_fixture_start(&fx, 0) != 0) return 1;
    double t0 = real_s();
    int passed = 0, failed = 0, xfail = 0, xpass = 0, errors = 0;
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
            sb_format(s, &r, line, sizeof(line));
            if (!c.search || strcmp(r.verdict, "FAIL") == 0) printf("%s\n", line);
            if (strcmp(r.verdict, "PASS") == 0) passed++;
            if (strcmp(r.verdict, "FAIL") == 0) failed++, failed_here = 1;
            if (strcmp(r.verdict, "XFAIL") == 0) xfail++;
            if (strcmp(r.verdict, "XPASS") == 0) xpass++;
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
    if (c.search && !failed && !errors) printf("no failing seed in %llu..%llu\n", c.from, c.to);
    printf("%d passed, %d failed, %d xfail, %d xpass%s (%.1f s real)\n", passed, failed + errors, xfail, xpass,
           c.search ? " (search: expected failures not judged as failing)" : "", took);
    return failed || errors || (!c.search && xpass) ? 1 : 0;
}
