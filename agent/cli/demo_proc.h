/* demo_proc: the child processes of `sluice demo` and their cleanup.
 *
 * Every child (redis-server, the mock, sluiced, the workers) is started
 * with PR_SET_PDEATHSIG = SIGKILL, so it dies with the demo even when the
 * demo is killed with SIGKILL, and in its own process group, so a Ctrl-C on
 * the terminal reaches the demo only and the demo stops its children in
 * order. SIGINT, SIGTERM and SIGHUP set a flag and wake a self-pipe that
 * the demo's waits poll (demo_proc_interrupted, demo_proc_signal_fd).
 *
 * Linux-only (prctl, /proc/self/exe). The signal flag is the one piece of
 * process-wide state: signal handlers have nowhere else to write. */
#ifndef SLUICE_DEMO_PROC_H
#define SLUICE_DEMO_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* Installs the handlers and ignores SIGPIPE. Returns 0 or -1. */
int demo_proc_signals_install(void);

/* The signal that asked the demo to stop, or 0. */
int demo_proc_interrupted(void);

/* The read end of the self-pipe: readable once a signal arrived. */
int demo_proc_signal_fd(void);

/* Starts argv[0] (a path, or a name looked up in PATH when it has no '/')
 * with fd 0, 1 and 2 taken from in, out and err (-1: /dev/null). Every
 * other descriptor of ours is close-on-exec. Returns the pid or -1 (with
 * errno; a failed exec shows as exit status 127). */
pid_t demo_proc_spawn(char *const argv[], int in, int out, int err);

/* Sends sig to pid, waits up to timeout_ms for it to exit, then SIGKILLs
 * it and reaps it. Returns the wait status, or -1 when pid <= 0. */
int demo_proc_stop(pid_t pid, int sig, int timeout_ms);

/* 1 when pid has exited (and is reaped into *status), else 0. */
int demo_proc_exited(pid_t pid, int *status);

/* Sleeps ms, or less when a signal arrives. */
void demo_proc_sleep_ms(int ms);

/* Path of the running executable (/proc/self/exe). Returns 0 or -1. */
int demo_proc_self_exe(char *out, size_t n);

/* Finds an executable: explicit (when non-NULL, must be executable), else
 * each of candidates[] (NULL-terminated, may be empty), else name in PATH.
 * Returns 0 with the path in out, or -1. */
int demo_proc_find_exe(const char *explicit_path, const char *const *candidates, const char *name, char *out, size_t n);

/* Removes a directory tree (best effort). */
void demo_proc_rmtree(const char *dir);

/* CLOCK_MONOTONIC in ns and ms. */
long long demo_proc_now_ns(void);
double demo_proc_now_ms(void);

#endif
