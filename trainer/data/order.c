/* An epoch's order of training windows (see data_internal.h): the
 * Fisher-Yates table every run has used, while it stays small; past that a
 * keyed Feistel permutation, so a corpus of billions of windows costs no
 * memory for its shuffle. Both depend on (seed, epoch) only, so a resumed
 * run rebuilds the order without replaying earlier epochs. */
#include "data_internal.h"

#include <stdlib.h>

static void build_table(data_order *o, uint64_t seed, uint64_t epoch)
{
    uint64_t n = o->n;
    for (uint64_t i = 0; i < n; i++)
        o->table[i] = i;
    moe_xoshiro rng;
    xoshiro_seed(&rng, rng_hash3(seed, RNG_DOMAIN_SHUFFLE, epoch));
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = xoshiro_below(&rng, i + 1);
        uint64_t t = o->table[i];
        o->table[i] = o->table[j];
        o->table[j] = t;
    }
}

/* A bijection of [0, 4^half_bits): four Feistel rounds over two halves. */
static uint64_t feistel(uint64_t x, uint64_t key, uint64_t half_bits)
{
    uint64_t mask = (1ull << half_bits) - 1;
    uint64_t l = x >> half_bits, r = x & mask;
    for (uint64_t round = 0; round < 4; round++) {
        uint64_t f = rng_hash3(key, round, r) & mask;
        uint64_t t = l ^ f;
        l = r;
        r = t;
    }
    return (l << half_bits) | r;
}

uint64_t order_at(data_order *o, uint64_t seed, uint64_t epoch, uint64_t i, moe_err *e)
{
    if (o->n <= ORDER_TABLE_MAX) {
        if (!o->table && !(o->table = malloc((o->n ? o->n : 1) * sizeof *o->table))) {
            moe_errf(e, "out of memory for the order of %llu windows", (unsigned long long)o->n);
            return UINT64_MAX;
        }
        if (!o->ready || o->epoch != epoch) {
            build_table(o, seed, epoch);
            o->epoch = epoch;
            o->ready = 1;
        }
        return o->table[i];
    }
    if (!o->ready || o->epoch != epoch) {
        o->half_bits = 1;
        while ((1ull << (2 * o->half_bits)) < o->n)
            o->half_bits++;
        o->key = rng_hash3(seed, RNG_DOMAIN_SHUFFLE, epoch);
        o->epoch = epoch;
        o->ready = 1;
    }
    /* cycle walking: the domain is below 4 n, so a few steps on average */
    uint64_t x = feistel(i, o->key, o->half_bits);
    while (x >= o->n)
        x = feistel(x, o->key, o->half_bits);
    return x;
}

void order_free(data_order *o)
{
    free(o->table);
    o->table = NULL;
    o->ready = 0;
}
