/* bench_opts: the table-driven command line of the benchmarks
 * (tests/bench/bench_*.c). A benchmark describes its options as rows (name,
 * kind, offset of the field in its options struct, range, help) and calls
 * bench_opts_parse(). Header-only, static functions. */
#ifndef SLUICE_BENCH_OPTS_H
#define SLUICE_BENCH_OPTS_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum opt_kind { OPT_NUM, OPT_STR, OPT_FLAG } opt_kind;

typedef struct opt_row {
    const char *name;
    opt_kind kind;
    size_t off;      /* of a double (OPT_NUM), a const char * (OPT_STR), an int (OPT_FLAG) */
    double min, max; /* OPT_NUM */
    const char *help;
} opt_row;

/* Fills the struct at base from argv[1..argc); errors name prog and the
 * option on stderr and return -1. */
static inline int bench_opts_parse(const char *prog, const opt_row *rows, size_t nrows, void *base, int argc,
                                   char **argv) {
    for (int i = 1; i < argc; i++) {
        const opt_row *row = NULL;
        for (size_t k = 0; k < nrows; k++)
            if (strcmp(argv[i], rows[k].name) == 0) row = &rows[k];
        if (!row) {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[i]);
            return -1;
        }
        char *field = (char *)base + row->off;
        if (row->kind == OPT_FLAG) {
            *(int *)(void *)field = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, row->name);
            return -1;
        }
        const char *v = argv[++i];
        if (row->kind == OPT_STR) {
            *(const char **)(void *)field = v;
            continue;
        }
        char *end;
        double d = strtod(v, &end);
        if (!*v || *end || !isfinite(d) || d < row->min || d > row->max) {
            fprintf(stderr, "%s: %s: expected a number in [%g, %g], got '%s'\n", prog, row->name, row->min, row->max,
                    v);
            return -1;
        }
        *(double *)(void *)field = d;
    }
    return 0;
}

#endif
