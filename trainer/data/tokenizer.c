/* Byte-level genomic tokenizer: id = byte value, with ids 0..3 taken by
 * the special tokens (as in the BioNeMo genomic Mixtral recipe and Evo 2). */
#include "data.h"

int tok_encode_byte(unsigned char c)
{
    if (c < MOE_TOK_N_SPECIAL)
        return MOE_TOK_UNK;
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 'A';
    return c;
}

void tok_encode(const uint8_t *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)tok_encode_byte(in[i]);
}

int tok_decode(int id)
{
    if (id < MOE_TOK_N_SPECIAL || id >= MOE_TOK_VOCAB)
        return -1;
    return id;
}

const char *tok_special_name(int id)
{
    switch (id) {
    case MOE_TOK_EOS: return "<eos>";
    case MOE_TOK_PAD: return "<pad>";
    case MOE_TOK_BOS: return "<bos>";
    case MOE_TOK_UNK: return "<unk>";
    default: return NULL;
    }
}

int tok_complement(int id)
{
    switch (id) {
    case 'A': return 'T';
    case 'T': return 'A';
    case 'U': return 'A';
    case 'C': return 'G';
    case 'G': return 'C';
    case 'R': return 'Y'; /* A|G  <-> C|T */
    case 'Y': return 'R';
    case 'K': return 'M'; /* G|T  <-> A|C */
    case 'M': return 'K';
    case 'B': return 'V'; /* not A <-> not T */
    case 'V': return 'B';
    case 'D': return 'H'; /* not C <-> not G */
    case 'H': return 'D';
    default: return id;   /* S, W, N, specials */
    }
}

int tok_is_acgt(int id)
{
    return id == 'A' || id == 'C' || id == 'G' || id == 'T';
}

int tok_segments(const int32_t *inputs, int B, int T, int32_t *pos, int32_t *cu_seqlens,
                 int *max_len)
{
    int n = 0, longest = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *row = inputs + (size_t)b * T;
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t == 0 || tok_sequence_starts(row[t - 1], row[t])) {
                if (t - start > longest)
                    longest = t - start;
                start = t;
                cu_seqlens[n++] = b * T + t;
            }
            pos[(size_t)b * T + t] = t - start;
        }
        if (T - start > longest)
            longest = T - start;
    }
    cu_seqlens[n] = B * T;
    *max_len = longest;
    return n;
}
