/* run_files: the result and error files of `sluice run`, JSON Lines that
 * make a run resumable.
 *
 * A file is opened for appending and locked (flock, exclusive, without
 * waiting), so two runs never write the same file. Opening it cuts off a
 * partial last line (a record a crash cut short: its request is done
 * again) and collects the id of every record, so a rerun skips what is
 * done. Each record is then written with one write(2) of the whole line,
 * so what a record says is on disk (in the page cache) before the next
 * request is decided; with fsync set, also through to the device.
 *
 * Depends on jansson and POSIX. Not thread-safe (one owner). */
#ifndef SLUICE_RUN_FILES_H
#define SLUICE_RUN_FILES_H

#include <stddef.h>

#include <jansson.h>

#include "run_input.h"

typedef struct run_file {
    int fd;    /* -1 when closed */
    int fsync; /* fdatasync after every record */
    char path[4096];
} run_file;

/* Opens path (created when missing), locks it, repairs a partial last line
 * and adds the key of every record's "id" to ids (when not NULL).
 * *records gets the number of records read, *bad the lines that are not a
 * record with an id (skipped). Returns 0, or -1 with a message in err. */
int run_file_open(run_file *f, const char *path, int fsync, run_set *ids, size_t *records, size_t *bad, char *err,
                  size_t errlen);

/* Appends record as one line. Returns 0, or -1 with a message in err. */
int run_file_append(run_file *f, const json_t *record, char *err, size_t errlen);

/* Unlocks and closes. Safe on a closed file. */
void run_file_close(run_file *f);

#endif
