/* run_files: see run_files.h. */
#define _GNU_SOURCE
#include "run_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Cuts the file after its last newline when the last line is partial. */
static int repair_tail(int fd, off_t size, const char *path, char *err, size_t errlen) {
    char buf[4096];
    off_t end = size;
    while (end > 0) {
        size_t n = end < (off_t)sizeof(buf) ? (size_t)end : sizeof(buf);
        off_t at = end - (off_t)n;
        if (pread(fd, buf, n, at) != (ssize_t)n) {
            snprintf(err, errlen, "%s: read: %s", path, strerror(errno));
            return -1;
        }
        if (end == size && buf[n - 1] == '\n') return 0; /* complete */
        for (size_t i = n; i-- > 0;) {
            if (buf[i] == '\n') {
                end = at + (off_t)i + 1;
                goto cut;
            }
        }
        end = at;
    }
cut:
    if (ftruncate(fd, end) != 0) {
        snprintf(err, errlen, "%s: cannot cut the partial last record: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int run_file_open(run_file *f, const char *path, int fsync_each, run_set *ids, size_t *records, size_t *bad, char *err,
                  size_t errlen) {
    f->fd = -1;
    f->fsync = fsync_each;
    *records = *bad = 0;
    snprintf(f->path, sizeof(f->path), "%s", path);
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "%s: %s", path,
                 errno == EWOULDBLOCK ? "another sluice run is writing this file" : strerror(errno));
        close(fd);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_size > 0 && repair_tail(fd, st.st_size, path, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    FILE *in = fopen(path, "r");
    if (!in) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (run_line_blank(line, (size_t)n - (line[n - 1] == '\n'))) continue;
        json_t *rec = json_loadb(line, (size_t)n, 0, NULL);
        char *key = run_id_key(json_object_get(rec, "id"));
        if (!key) {
            (*bad)++;
        } else {
            (*records)++;
            if (ids && run_set_add(ids, key) < 0) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
        }
        free(key);
        json_decref(rec);
        if (rc) break;
    }
    free(line);
    fclose(in);
    if (rc) {
        close(fd);
        return -1;
    }
    f->fd = fd;
    return 0;
}

int run_file_append(run_file *f, const json_t *record, char *err, size_t errlen) {
    char *text = json_dumps(record, JSON_COMPACT);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for the NUL: replace it */
    size_t off = 0;
    int rc = 0;
    while (off < len + 1) {
        ssize_t w = write(f->fd, text + off, len + 1 - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errlen, "%s: write: %s", f->path, strerror(errno));
            rc = -1;
            break;
        }
        off += (size_t)w;
    }
    free(text);
    if (rc == 0 && f->fsync && fdatasync(f->fd) != 0) {
        snprintf(err, errlen, "%s: fdatasync: %s", f->path, strerror(errno));
        rc = -1;
    }
    return rc;
}

void run_file_close(run_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}
