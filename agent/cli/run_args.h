/* run_args: what cli_flags does not do, for `sluice run` and `sluice
 * status`: positional arguments (deployment names) and one repeatable flag
 * (--header). run_args_split() sorts argv into the part cli_parse() reads
 * (the table's flags with their values), the positionals and the values
 * of the repeatable flag. Pointers are borrowed from argv. No globals. */
#ifndef SLUICE_RUN_ARGS_H
#define SLUICE_RUN_ARGS_H

#include <stddef.h>

#include "cli_flags.h"

typedef struct run_args {
    char **flags; /* argv[0] and the table's flags, for cli_parse */
    int nflags;
    char **pos; /* arguments that are not flags */
    int npos;
    char **multi; /* values of the repeatable flag */
    int nmulti;
} run_args;

/* multi: the repeatable flag's name ("--header"), or NULL. Returns 0, or
 * -1 after printing why (a repeatable flag without its value, OOM). Free
 * with run_args_free. An unknown flag is left for cli_parse to report. */
int run_args_split(const char *cmd, const cli_flag *flags, size_t nflags, const char *multi, int argc, char **argv,
                   run_args *out);
void run_args_free(run_args *a);

#endif
