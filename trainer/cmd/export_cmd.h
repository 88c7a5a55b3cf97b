/* moekit: `moe-train export`: a Hugging Face model directory from any
 * checkpoint (the training state is the checkpoint; this is its export). */
#ifndef MOE_EXPORT_CMD_H
#define MOE_EXPORT_CMD_H

#include <stdio.h>

/* moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32] [--max-shard-size 5GB]
 * [--staging-mb N] */
int export_main(int argc, char **argv);

/* export's options as --help lines. */
void export_print_options(FILE *f);

#endif
