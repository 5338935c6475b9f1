/* cli_flags: see cli_flags.h. */
#include "cli_flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int bad(const char *cmd, const char *flag, const char *why, const char *value) {
    fprintf(stderr, "sluice %s: %s: %s%s%s%s (see sluice %s --help)\n", cmd, flag, why, value ? " '" : "",
            value ? value : "", value ? "'" : "", cmd);
    return -1;
}

static int parse_double(const char *v, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

static int check_range(const char *cmd, const cli_flag *fl, double d, const char *v) {
    if (d < fl->min || d > fl->max) {
        char why[96];
        snprintf(why, sizeof(why), "must be in [%g, %g], got", fl->min, fl->max);
        return bad(cmd, fl->name, why, v);
    }
    return 0;
}

static int apply(const char *cmd, const cli_flag *fl, void *base, const char *v) {
    char *field = (char *)base + fl->off;
    double d, e;
    switch (fl->kind) {
    case CLI_BOOL: *(int *)field = 1; return 0;
    case CLI_STR:
        if (!*v) return bad(cmd, fl->name, "must not be empty", NULL);
        *(const char **)field = v;
        return 0;
    case CLI_INT:
        if (parse_double(v, &d) != 0 || d != floor(d)) return bad(cmd, fl->name, "expected a whole number, got", v);
        if (check_range(cmd, fl, d, v) != 0) return -1;
        *(long long *)field = (long long)d;
        return 0;
    case CLI_DOUBLE:
        if (parse_double(v, &d) != 0) return bad(cmd, fl->name, "expected a number, got", v);
        if (check_range(cmd, fl, d, v) != 0) return -1;
        *(double *)field = d;
        return 0;
    case CLI_RANGE: {
        char lo[64];
        const char *dash = strchr(v + (*v == '-'), '-');
        size_t n = dash ? (size_t)(dash - v) : strlen(v);
        if (n == 0 || n >= sizeof(lo)) return bad(cmd, fl->name, "expected LO-HI or N, got", v);
        memcpy(lo, v, n);
        lo[n] = '\0';
        if (parse_double(lo, &d) != 0 || (dash ? parse_double(dash + 1, &e) : (e = d, 0)) != 0)
            return bad(cmd, fl->name, "expected LO-HI or N, got", v);
        if (check_range(cmd, fl, d, v) != 0 || check_range(cmd, fl, e, v) != 0) return -1;
        if (d > e) return bad(cmd, fl->name, "LO must not exceed HI in", v);
        ((double *)field)[0] = d;
        ((double *)field)[1] = e;
        return 0;
    }
    }
    return -1;
}

int cli_parse(const char *cmd, const cli_flag *flags, size_t nflags, void *base, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = arg[0] == '-' && arg[1] == '-' ? strchr(arg, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_flag *fl = NULL;
        if (strcmp(arg, "-h") == 0) arg = "--help", nlen = 6;
        for (size_t k = 0; k < nflags && !fl; k++) {
            const cli_flag *c = &flags[k];
            if ((strlen(c->name) == nlen && strncmp(c->name, arg, nlen) == 0) ||
                (c->alias && strcmp(c->alias, arg) == 0 && !eq))
                fl = c;
        }
        if (!fl) {
            fprintf(stderr, "sluice %s: unknown option '%s' (see sluice %s --help)\n", cmd, argv[i], cmd);
            return -1;
        }
        const char *value = NULL;
        if (fl->kind != CLI_BOOL) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return bad(cmd, fl->name, "needs a value", NULL);
        } else if (eq) {
            return bad(cmd, fl->name, "takes no value", NULL);
        }
        if (apply(cmd, fl, base, value) != 0) return -1;
    }
    return 0;
}

void cli_print_flags(FILE *f, const cli_flag *flags, size_t nflags) {
    for (size_t i = 0; i < nflags; i++) {
        const cli_flag *fl = &flags[i];
        if (!fl->help) continue;
        char left[48];
        snprintf(left, sizeof(left), "%s%s%s%s%s", fl->alias ? fl->alias : "", fl->alias ? ", " : "", fl->name,
                 fl->metavar ? " " : "", fl->metavar ? fl->metavar : "");
        fprintf(f, "  %-26s %s\n", left, fl->help);
    }
}

const char *cli_default_config(void) {
    const char *env = getenv("SLUICE_CONFIG");
    if (env && *env) return env;
    return access("/etc/sluice/sluiced.yaml", R_OK) == 0 ? "/etc/sluice/sluiced.yaml" : NULL;
}
