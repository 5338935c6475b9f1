/* sim_exec: `sluice sim` executes sluice-sim, the simulator's own
 * executable (it cannot be linked into `sluice`: see sluice_sim.c), found
 * as `sluice demo` finds sluiced: $SLUICE_SIM, else next to this
 * executable (the install puts both in the same bin directory; a build
 * tree has them side by side too), else in PATH. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "demo_proc.h"

int cmd_sim_exec(int argc, char **argv) {
    char self[4096], cand[4200], bin[4200];
    if (demo_proc_self_exe(self, sizeof(self)) != 0) {
        fprintf(stderr, "sluice sim: cannot find my own executable (/proc/self/exe)\n");
        return 1;
    }
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(cand, sizeof(cand), "%s/sluice-sim", self);
    const char *cands[] = {cand, NULL};
    const char *env = getenv("SLUICE_SIM");
    if (demo_proc_find_exe(env && *env ? env : NULL, cands, "sluice-sim", bin, sizeof(bin)) != 0) {
        fprintf(stderr,
                "sluice sim: sluice-sim not found (looked at %s%s%s and in PATH); it is built with the tests "
                "(cmake --build BUILD --target sluice-sim)\n",
                env && *env ? env : cand, env && *env ? ", " : "", env && *env ? cand : "");
        return 1;
    }
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    if (!args) return 1;
    args[0] = bin;
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    fflush(stdout);
    execv(bin, args);
    fprintf(stderr, "sluice sim: cannot run %s: %s\n", bin, strerror(errno));
    free(args);
    return 1;
}
