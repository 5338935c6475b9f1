/* cmd: the subcommands of the `sluice` command.
 *
 * Each handler gets argv with argv[0] set to the subcommand's name and
 * returns the process exit status: 0 success, 1 runtime failure, 2 usage
 * error (bad flag or argument, or not implemented yet). Handlers print
 * their own messages, on stderr prefixed with "sluice NAME: ". */
#ifndef SLUICE_CMD_H
#define SLUICE_CMD_H

int cmd_mock(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_run(int argc, char **argv), cmd_status(int argc, char **argv), cmd_top(int argc, char **argv);

/* sluice sim: cmd_sim_exec (in `sluice`) executes sluice-sim, whose main
 * runs cmd_sim (cmd_sim.c, linked with the simulator, never with libuv). */
int cmd_sim_exec(int argc, char **argv);
int cmd_sim(int argc, char **argv);

/* For subcommands that are listed but not written yet: says so, exit 2. */
int cmd_not_implemented(int argc, char **argv);

#endif
