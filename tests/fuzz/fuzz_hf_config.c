/* Fuzz the Hugging Face config.json reader. A file it accepts describes a
 * model moekit can build, so writing it back and reading that again must
 * give the same sizes. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/config/hf_config.h"

FUZZ_TARGET("hf_config");

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("config.json", data, size);
    moe_model_cfg m, back;
    memset(&m, 0, sizeof m);
    moe_err e = {{0}};
    if (hf_config_read(path, &m, &e) != 0) {
        if (e.msg[0] == '\0')
            abort();
        return 0;
    }
    char out[600];
    snprintf(out, sizeof out, "%s/written.json", fuzz_scratch_dir());
    if (hf_config_write(out, &m, &e) != 0)
        return 0; /* e.g. sizes the writer refuses: an error, not a crash */
    memset(&back, 0, sizeof back);
    if (hf_config_read(out, &back, &e) != 0) {
        fprintf(stderr, "a written config.json does not read back: %s\n", e.msg);
        abort();
    }
    if (back.hidden_size != m.hidden_size || back.num_layers != m.num_layers ||
        back.num_heads != m.num_heads || back.num_kv_heads != m.num_kv_heads ||
        back.head_dim != m.head_dim || back.num_experts != m.num_experts ||
        back.top_k != m.top_k || back.intermediate_size != m.intermediate_size ||
        back.vocab_size != m.vocab_size) {
        fprintf(stderr, "config.json round trip changed the model sizes\n");
        abort();
    }
    return 0;
}
