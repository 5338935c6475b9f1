/* bench_estimate: sluice's prompt estimate (lib/core/estimate.h) of whole
 * text files, for tests/bench/estimate_tokenizers.sh, which sets it beside
 * the providers' tokenizers (docs/providers.md, "The prompt estimate").
 *   bench_estimate FILE...
 * Prints one line per file: its path, its code points and the estimate's
 * tokens, tab-separated. Exit 1 when a file cannot be read. */
#include <stdio.h>
#include <stdlib.h>

#include "estimate.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_estimate FILE...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t len = 0;
        char *text = slurp(argv[i], &len);
        if (!text) {
            perror(argv[i]);
            return 1;
        }
        long long points = 0;
        for (size_t k = 0; k < len; k++)
            if (((unsigned char)text[k] & 0xC0) != 0x80) points++;
        printf("%s\t%lld\t%lld\n", argv[i], points, estimate_text_tokens(estimate_text_quarters(text, len)));
        free(text);
    }
    return 0;
}
