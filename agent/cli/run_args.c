/* run_args: see run_args.h. */
#include "run_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_flag *lookup(const cli_flag *flags, size_t nflags, const char *arg, size_t nlen) {
    for (size_t k = 0; k < nflags; k++) {
        const cli_flag *c = &flags[k];
        if ((strlen(c->name) == nlen && strncmp(c->name, arg, nlen) == 0) || (c->alias && strcmp(c->alias, arg) == 0))
            return c;
    }
    return NULL;
}

int run_args_split(const char *cmd, const cli_flag *flags, size_t nflags, const char *multi, int argc, char **argv,
                   run_args *out) {
    memset(out, 0, sizeof(*out));
    size_t n = (size_t)argc + 1;
    out->flags = calloc(n, sizeof(char *));
    out->pos = calloc(n, sizeof(char *));
    out->multi = calloc(n, sizeof(char *));
    if (!out->flags || !out->pos || !out->multi) {
        fprintf(stderr, "sluice %s: out of memory\n", cmd);
        run_args_free(out);
        return -1;
    }
    out->flags[out->nflags++] = argv[0];
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            out->pos[out->npos++] = a;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (multi && strlen(multi) == nlen && strncmp(a, multi, nlen) == 0) {
            if (eq) {
                out->multi[out->nmulti++] = (char *)eq + 1;
            } else if (i + 1 < argc) {
                out->multi[out->nmulti++] = argv[++i];
            } else {
                fprintf(stderr, "sluice %s: %s: needs a value (see sluice %s --help)\n", cmd, multi, cmd);
                run_args_free(out);
                return -1;
            }
            continue;
        }
        out->flags[out->nflags++] = a;
        const cli_flag *fl = lookup(flags, nflags, a, nlen);
        if (fl && fl->kind != CLI_BOOL && !eq && i + 1 < argc) out->flags[out->nflags++] = argv[++i];
    }
    return 0;
}

void run_args_free(run_args *a) {
    free(a->flags);
    free(a->pos);
    free(a->multi);
    memset(a, 0, sizeof(*a));
}
