/* INCRBYFLOAT and HINCRBYFLOAT as redis computes them: in C's long double,
 * which Haskell has no type for. Read with redis's rules (strtold, the
 * whole string, no leading space, no NaN, no overflow), added, and written
 * with redis's human form (%.17Lf without trailing zeros). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_LD_CHARS (5 * 1024)

/* A long double as redis reads one; 1 if the string is one. */
static int kv_read_ld(const char *s, size_t len, long double *out)
{
    char buf[KV_LD_CHARS];
    char *end;
    long double v;

    if (len == 0 || len >= sizeof(buf))
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    v = strtold(buf, &end);
    if (isspace((unsigned char)buf[0]) || end[0] != '\0' || (size_t)(end - buf) != len ||
        (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL || fpclassify(v) == FP_ZERO)) ||
        errno == EINVAL || isnan(v))
        return 0;
    *out = v;
    return 1;
}

/* 1 if the string is a finite long double, 0 if an infinite one, -1 if
 * it is none. */
int weft_kv_ld_finite(const char *s, size_t len)
{
    long double v;
    if (!kv_read_ld(s, len, &v))
        return -1;
    return isinf(v) ? 0 : 1;
}

/* a + b into out (at least KV_LD_CHARS bytes): the length written, or -1
 * if a is not a long double, -2 if b is not, -3 if the sum is NaN or
 * infinite. A NULL a counts as 0 (a missing key or field). */
int weft_kv_ld_add(const char *a, size_t alen, const char *b, size_t blen, char *out)
{
    long double x = 0, y;
    int l;
    if (a != NULL && !kv_read_ld(a, alen, &x))
        return -1;
    if (!kv_read_ld(b, blen, &y))
        return -2;
    x += y;
    if (isnan(x) || isinf(x))
        return -3;
    l = snprintf(out, KV_LD_CHARS, "%.17Lf", x);
    if (l < 0 || l + 1 > KV_LD_CHARS)
        return -3;
    if (strchr(out, '.') != NULL) {
        char *p = out + l - 1;
        while (*p == '0') {
            p--;
            l--;
        }
        if (*p == '.')
            l--;
    }
    if (l == 2 && out[0] == '-' && out[1] == '0') {
        out[0] = '0';
        l = 1;
    }
    return l;
}
