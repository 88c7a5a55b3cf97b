/* moekit: the byte tokenizer as Hugging Face files (hf_tokenizer.h). */
#include "hf_tokenizer.h"

#include <stdio.h>

#include "../ckpt/fsio.h"
#include "../ckpt/json.h"
#include "data.h"

/* The character of byte id b as UTF-8 (b < 128: itself; else U+0080-U+00FF). */
static int byte_char(int b, char out[3])
{
    if (b < 0x80) {
        out[0] = (char)b;
        return 1;
    }
    out[0] = (char)(0xC0 | (b >> 6));
    out[1] = (char)(0x80 | (b & 0x3F));
    return 2;
}

static void special_tokens(json_writer *w)
{
    jw_key(w, "added_tokens");
    jw_array_begin(w);
    for (int id = 0; id < MOE_TOK_N_SPECIAL; id++) {
        jw_object_begin(w);
        jw_key(w, "id");
        jw_int(w, id);
        jw_key(w, "content");
        jw_string(w, tok_special_name(id));
        static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (int f = 0; f < 4; f++) {
            jw_key(w, flags[f]);
            jw_bool(w, 0);
        }
        jw_key(w, "special");
        jw_bool(w, 1);
        jw_object_end(w);
    }
    jw_array_end(w);
}

/* What tok_encode_byte folds (lower case to upper case) as Replace steps. */
static void normalizer(json_writer *w)
{
    jw_key(w, "normalizer");
    jw_object_begin(w);
    jw_key(w, "type");
    jw_string(w, "Sequence");
    jw_key(w, "normalizers");
    jw_array_begin(w);
    for (int b = MOE_TOK_N_SPECIAL; b < 128; b++) {
        int to = tok_encode_byte((unsigned char)b);
        if (to == b || to == MOE_TOK_UNK)
            continue;
        char from_s[3], to_s[3];
        int nf = byte_char(b, from_s), nt = byte_char(to, to_s);
        jw_object_begin(w);
        jw_key(w, "type");
        jw_string(w, "Replace");
        jw_key(w, "pattern");
        jw_object_begin(w);
        jw_key(w, "String");
        jw_string_n(w, from_s, (size_t)nf);
        jw_object_end(w);
        jw_key(w, "content");
        jw_string_n(w, to_s, (size_t)nt);
        jw_object_end(w);
    }
    jw_array_end(w);
    jw_object_end(w);
}

static void model(json_writer *w)
{
    jw_key(w, "model");
    jw_object_begin(w);
    jw_key(w, "type");
    jw_string(w, "WordLevel");
    jw_key(w, "vocab");
    jw_object_begin(w);
    for (int id = 0; id < MOE_TOK_VOCAB; id++) {
        char s[3] = {0};
        if (id < MOE_TOK_N_SPECIAL)
            jw_key(w, tok_special_name(id));
        else {
            byte_char(id, s);
            jw_key(w, s);
        }
        jw_int(w, id);
    }
    jw_object_end(w);
    jw_key(w, "unk_token");
    jw_string(w, tok_special_name(MOE_TOK_UNK));
    jw_object_end(w);
}

static int tokenizer_json(const char *path, moe_err *e)
{
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "version");
    jw_string(&w, "1.0");
    jw_key(&w, "truncation");
    jw_null(&w);
    jw_key(&w, "padding");
    jw_null(&w);
    special_tokens(&w);
    normalizer(&w);
    jw_key(&w, "pre_tokenizer"); /* every character its own piece */
    jw_object_begin(&w);
    jw_key(&w, "type");
    jw_string(&w, "Split");
    jw_key(&w, "pattern");
    jw_object_begin(&w);
    jw_key(&w, "Regex");
    jw_string(&w, "");
    jw_object_end(&w);
    jw_key(&w, "behavior");
    jw_string(&w, "Isolated");
    jw_key(&w, "invert");
    jw_bool(&w, 0);
    jw_object_end(&w);
    jw_key(&w, "post_processor");
    jw_null(&w);
    jw_key(&w, "decoder");
    jw_object_begin(&w);
    jw_key(&w, "type");
    jw_string(&w, "Fuse");
    jw_object_end(&w);
    model(&w);
    jw_object_end(&w);
    jw_raw(&w, "\n", 1);
    return jw_write_file(&w, path, e);
}

static void special_map(json_writer *w)
{
    static const struct {
        const char *key;
        int id;
    } roles[] = {{"bos_token", MOE_TOK_BOS}, {"eos_token", MOE_TOK_EOS},
                 {"pad_token", MOE_TOK_PAD}, {"unk_token", MOE_TOK_UNK}};
    for (int i = 0; i < 4; i++) {
        jw_key(w, roles[i].key);
        jw_string(w, tok_special_name(roles[i].id));
    }
}

static int small_json(const char *path, int config, int max_len, moe_err *e)
{
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    special_map(&w);
    if (config) {
        jw_key(&w, "tokenizer_class");
        jw_string(&w, "PreTrainedTokenizerFast");
        jw_key(&w, "model_max_length");
        jw_int(&w, max_len);
        jw_key(&w, "clean_up_tokenization_spaces");
        jw_bool(&w, 0);
        jw_key(&w, "add_bos_token");
        jw_bool(&w, 0);
        jw_key(&w, "add_eos_token");
        jw_bool(&w, 0);
    }
    jw_object_end(&w);
    jw_raw(&w, "\n", 1);
    return jw_write_file(&w, path, e);
}

int hf_tokenizer_write(const char *dir, int model_max_length, moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (tokenizer_json(path, e))
        return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (small_json(path, 1, model_max_length, e))
        return -1;
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    return small_json(path, 0, 0, e);
}
