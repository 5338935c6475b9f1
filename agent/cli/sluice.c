/* sluice: the command-line front end. Subcommands are rows of a table;
 * each lives in its own cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "demo.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

typedef struct sluice_command {
    const char *name;
    int (*handler)(int argc, char **argv);
    const char *help; /* NULL: hidden from the list (internal subcommands) */
} sluice_command;

static const sluice_command sluice_commands[] = {
    {"mock", cmd_mock, "serve a mock Azure OpenAI / OpenAI deployment with real rate limits"},
    {"demo", cmd_demo, "run the seed's client strategies and sluice, print the table"},
    {"run", cmd_run, "send a JSONL batch through a governed deployment"},
    {"status", cmd_status, "print the live budget of each deployment from Redis"},
    {"top", cmd_top, "like status, refreshed continuously"},
    {"sim", cmd_sim_exec, "simulate the fleet on virtual time: what a configuration would do, in seconds"},
    {"demo-worker", cmd_demo_worker, NULL},
};

#define SLUICE_NCOMMANDS (sizeof(sluice_commands) / sizeof(sluice_commands[0]))

int cmd_not_implemented(int argc, char **argv) {
    (void)argc;
    fprintf(stderr, "sluice %s: not implemented yet\n", argv[0]);
    return 2;
}

static void usage(FILE *f) {
    fprintf(f, "usage: sluice COMMAND [OPTIONS]\n"
               "       sluice COMMAND --help\n"
               "       sluice --version\n\n"
               "sluice paces a fleet's LLM API calls from one shared quota.\n\n"
               "commands:\n");
    for (size_t i = 0; i < SLUICE_NCOMMANDS; i++)
        if (sluice_commands[i].help) fprintf(f, "  %-8s %s\n", sluice_commands[i].name, sluice_commands[i].help);
}

static const sluice_command *find_command(const char *name) {
    for (size_t i = 0; i < SLUICE_NCOMMANDS; i++)
        if (strcmp(sluice_commands[i].name, name) == 0) return &sluice_commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    if (strcmp(arg, "help") == 0) {
        const sluice_command *c = argc > 2 ? find_command(argv[2]) : NULL;
        if (!c) {
            usage(argc > 2 ? stderr : stdout);
            return argc > 2 ? 2 : 0;
        }
        char *sub[] = {(char *)c->name, "--help", NULL};
        return c->handler(2, sub);
    }
    const sluice_command *c = find_command(arg);
    if (!c) {
        fprintf(stderr, "sluice: unknown command '%s' (see sluice --help)\n", arg);
        return 2;
    }
    return c->handler(argc - 1, argv + 1);
}
