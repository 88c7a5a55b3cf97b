/* One window of a split as a training row: its tokens (from memory or a
 * token store), the padding after a short record, reverse-complement
 * augmentation, and the targets the loss takes. The dataset's summary and
 * the batches both read windows here; a store read that fails is kept on
 * the dataset and reported by dataset_failed. */
#include "data_internal.h"

#include <string.h>

void reverse_complement_bases(uint8_t *w, size_t n)
{
    if (n == 0)
        return;
    size_t i = 0, j = n - 1;
    for (;;) {
        while (i < j && w[i] < MOE_TOK_N_SPECIAL)
            i++;
        while (i < j && w[j] < MOE_TOK_N_SPECIAL)
            j--;
        if (i >= j)
            break;
        uint8_t a = w[i];
        w[i++] = (uint8_t)tok_complement(w[j]);
        w[j--] = (uint8_t)tok_complement(a);
    }
    if (i == j && w[i] >= MOE_TOK_N_SPECIAL)
        w[i] = (uint8_t)tok_complement(w[i]); /* the middle base of an odd run */
}

/* The target of an input tok_in followed by tok: -1 for what the loss
 * ignores, a target across a sequence boundary among it. */
static int32_t target_id(const moe_dataset *ds, uint8_t tok_in, uint8_t tok)
{
    if (tok == MOE_TOK_PAD || tok_sequence_starts(tok_in, tok))
        return -1;
    if (ds->mask_degenerate && tok >= MOE_TOK_N_SPECIAL && !tok_is_acgt(tok))
        return -1;
    return tok;
}

void dataset_write_window(moe_dataset *ds, const data_split *s, uint64_t id, int reverse_complement,
                          int32_t *inputs, int32_t *targets)
{
    uint64_t start, n_real;
    size_t W = (size_t)ds->window, T = (size_t)ds->seq_length;
    uint8_t *w = ds->scratch;
    if (s->packed) {
        n_real = split_packed_read(s, id * (uint64_t)s->stride, W, w);
    } else {
        split_window(s, id, ds->seq_length, &start, &n_real);
        /* after a failed read no more: the failure is what every batch reports */
        if (!ds->io_failed &&
            s->part->src->read(s->part, start, (size_t)n_real, w, &ds->io_err) < (size_t)n_real)
            ds->io_failed = 1; /* reported by the caller that asked for the batch */
    }
    memset(w + n_real, MOE_TOK_PAD, W - (size_t)n_real);
    if (reverse_complement) /* each sequence on its own */
        for (size_t a = 0, z; a < W; a = z) {
            for (z = a + 1; z < W && !tok_sequence_starts(w[z - 1], w[z]); z++)
                ;
            reverse_complement_bases(w + a, z - a);
        }
    for (size_t t = 0; t < T; t++) {
        inputs[t] = w[t];
        targets[t] = target_id(ds, w[t], w[t + 1]);
    }
}

int dataset_failed(const moe_dataset *ds, moe_err *e)
{
    if (ds->io_failed) {
        *e = ds->io_err;
        return 1;
    }
    for (int d = 0; d < ds->n_parts; d++)
        if (ds->parts[d].failed) {
            *e = ds->parts[d].err;
            return 1;
        }
    return 0;
}
