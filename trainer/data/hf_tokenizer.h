/* moekit: the genomic byte tokenizer (data.h) as Hugging Face tokenizer
 * files, so AutoTokenizer / pipeline load an exported model:
 *   tokenizer.json          a `tokenizers` WordLevel model over single
 *                           characters: every character is split off
 *                           (Split, empty regex, Isolated), upper-cased as
 *                           tok_encode_byte does, and looked up; the 256
 *                           ids are the byte values, ids 0-3 the special
 *                           tokens <eos> <pad> <bos> <unk>, bytes that map
 *                           nowhere give <unk>; decoding fuses characters.
 *   tokenizer_config.json   PreTrainedTokenizerFast with those specials
 *   special_tokens_map.json
 * Bytes 128-255 are the characters U+0080-U+00FF (Latin-1): text is
 * unicode to `tokenizers`, bytes to moekit; nucleotide text is ASCII. */
#ifndef MOE_HF_TOKENIZER_H
#define MOE_HF_TOKENIZER_H

#include "../../common/err.h"

int hf_tokenizer_write(const char *dir, int model_max_length, moe_err *e);

#endif
