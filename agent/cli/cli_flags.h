/* cli_flags: command-line flags as rows of a table, for the `sluice`
 * subcommands that do not need more (demo, demo-worker).
 *
 * A row names a long flag (and optionally a short alias), the kind of its
 * value and the offset of the field it fills in the caller's options
 * struct. "--flag VALUE", "--flag=VALUE" and "-P VALUE" are accepted.
 * Numbers are checked against the row's range; a bad flag prints one line
 * on stderr ("sluice CMD: --flag: why (see sluice CMD --help)").
 * No dependencies beyond libc; no globals. */
#ifndef SLUICE_CLI_FLAGS_H
#define SLUICE_CLI_FLAGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_BOOL,   /* int, set to 1; takes no value */
    CLI_STR,    /* const char *, borrowed from argv; must not be empty */
    CLI_INT,    /* long long in [min, max] */
    CLI_DOUBLE, /* double in [min, max] */
    CLI_RANGE   /* "LO-HI" or "N" into two adjacent doubles, each in [min, max] */
} cli_kind;

typedef struct cli_flag {
    const char *name;    /* "--requests" */
    const char *alias;   /* "-N", or NULL */
    const char *metavar; /* "N"; NULL for CLI_BOOL */
    cli_kind kind;
    size_t off; /* offsetof the field in the options struct */
    double min, max;
    const char *help; /* one line; NULL hides the flag from the usage text */
} cli_flag;

/* Parses argv[1..argc-1] into the struct at base. "-h" means "--help" when
 * the table has a "--help" row. Returns 0, or -1 after printing why. */
int cli_parse(const char *cmd, const cli_flag *flags, size_t nflags, void *base, int argc, char **argv);

/* The configuration a command reads when --config is not given: the
 * SLUICE_CONFIG environment variable, else /etc/sluice/sluiced.yaml if
 * it is readable, else NULL (docs/cli.md). */
const char *cli_default_config(void);

/* Prints one line per visible flag: "  -N, --requests N    help". */
void cli_print_flags(FILE *f, const cli_flag *flags, size_t nflags);

#endif
