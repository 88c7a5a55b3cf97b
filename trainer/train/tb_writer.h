/* moekit: TensorBoard event files (logger.tensorboard), as Megatron-LM and
 * NeMo users read their runs.
 *
 * A file <run_dir>/events.out.tfevents.<unix time>.<host>.<pid> of TFRecord
 * records: uint64 length (little-endian), uint32 masked CRC32C of those 8
 * bytes, the data, uint32 masked CRC32C of the data. Each record's data is a
 * tensorflow.Event protobuf (tb_event.proto, encoded by protobuf-c): the
 * first one carries file_version "brain.Event:2", the others one scalar
 * summary value per metric. */
#ifndef MOE_TB_WRITER_H
#define MOE_TB_WRITER_H

#include <stdint.h>
#include <stdio.h>

#include "../../common/err.h"

typedef struct {
    FILE *f;
    char path[4400];
} tb_writer;

/* Create a new event file in run_dir and write its version record. */
int tb_open(tb_writer *w, const char *run_dir, moe_err *e);
/* One Event at step with the n (tag, value) scalars; flushed. */
int tb_write_scalars(tb_writer *w, int64_t step, double wall_time, const char *const *tags,
                     const double *values, int n, moe_err *e);
void tb_close(tb_writer *w);

/* CRC-32C (Castagnoli), and TFRecord's masked form of it. */
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_masked_crc32c(const void *data, size_t n);

#endif
