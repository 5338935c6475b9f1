/* sluice-sim: the executable behind `sluice sim` (cmd_sim.c). It links the
 * simulator (tests/sim: lib/core built against uvsim, whose uv_* functions
 * stand in for libuv's), so it cannot live in the `sluice` binary, which
 * links the real libuv; `sluice sim` executes it (sim_exec.c). */
#include "cmd.h"

int main(int argc, char **argv) {
    argv[0] = "sim";
    return cmd_sim(argc, argv);
}
