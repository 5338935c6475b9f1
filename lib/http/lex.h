/* lex: the character and token helpers lib/http's parsers share (RFC 9110
 * whitespace, ASCII case folding, counted-string comparison). Internal:
 * static inline, included by the parsers in lib/http only. */
#ifndef SLUICE_HTTP_LEX_H
#define SLUICE_HTTP_LEX_H

#include <stdbool.h>
#include <stddef.h>

/* Optional whitespace (OWS): space or horizontal tab. */
static inline bool is_ows(char ch) { return ch == ' ' || ch == '\t'; }

static inline bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static inline bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

/* ASCII lower case (header names and tokens are ASCII; no locale). */
static inline char lower(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

/* Strips OWS from both ends of the counted string *v, *len. */
static inline void trim(const char **v, size_t *len) {
    const char *p = *v;
    size_t n = *len;
    while (n > 0 && is_ows(p[0])) {
        p++;
        n--;
    }
    while (n > 0 && is_ows(p[n - 1])) n--;
    *v = p;
    *len = n;
}

/* Case-insensitive comparison of a counted string with a lowercase literal. */
static inline bool name_eq(const char *a, size_t alen, const char *lit) {
    size_t i = 0;
    for (; i < alen; i++)
        if (lit[i] == '\0' || lower(a[i]) != lit[i]) return false;
    return lit[i] == '\0';
}

#endif
