/* Hash-consed configuration values (config_intern.h): an open-addressing
 * table of copies, grown at 3/4 full; a mutex because SPANK and test
 * programs may load configs from several threads. */
#include "config_intern.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t n;
    uint64_t hash;
    unsigned char data[]; /* n bytes */
} interned;

static interned **table;
static size_t table_cap, table_used;
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash_bytes(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int grow(void)
{
    size_t cap = table_cap ? 2 * table_cap : 256;
    interned **t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < table_cap; i++)
        if (table[i]) {
            size_t j = table[i]->hash & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = table[i];
        }
    free(table);
    table = t;
    table_cap = cap;
    return 0;
}

const void *config_intern(const void *data, size_t n)
{
    uint64_t h = hash_bytes(data, n);
    const void *out = NULL;
    pthread_mutex_lock(&table_mu);
    if (4 * (table_used + 1) > 3 * table_cap && grow() < 0)
        goto done;
    size_t j = h & (table_cap - 1);
    for (; table[j]; j = (j + 1) & (table_cap - 1))
        if (table[j]->hash == h && table[j]->n == n && !memcmp(table[j]->data, data, n)) {
            out = table[j]->data;
            goto done;
        }
    interned *x = malloc(sizeof *x + (n ? n : 1));
    if (!x)
        goto done;
    x->n = n;
    x->hash = h;
    if (n)
        memcpy(x->data, data, n);
    table[j] = x;
    table_used++;
    out = x->data;
done:
    pthread_mutex_unlock(&table_mu);
    return out;
}

const char *config_intern_str(const char *s, size_t len)
{
    char *tmp = malloc(len + 1);
    if (!tmp)
        return NULL;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    const char *out = config_intern(tmp, len + 1);
    free(tmp);
    return out;
}
