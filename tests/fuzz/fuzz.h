/* moekit fuzz harnesses: what every harness shares.
 *
 * Each fuzz_<name>.c defines the libFuzzer entry point
 *   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 * and FUZZ_TARGET(name). Built with clang -fsanitize=fuzzer it is a fuzzer
 * (tests/fuzz/run.sh); linked with replay.c instead it is a plain program
 * that feeds every file of its committed corpus to the entry point, so the
 * regression inputs run under `make unit` (and ASan in build-san) with no
 * clang. The readers under test take paths, so most harnesses write the
 * input to a scratch file first. */
#ifndef MOE_FUZZ_H
#define MOE_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The corpus directory name of this harness (tests/fuzz/corpus/<name>). */
#define FUZZ_TARGET(name) const char fuzz_target_name[] = name

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch directory, made on first use and removed at exit. */
const char *fuzz_scratch_dir(void);

/* Write size bytes to <scratch>/<name>, replacing it; returns the path
 * (static storage, valid until the next call) or aborts: a harness that
 * cannot write its input must not report "no crash". */
const char *fuzz_write_file(const char *name, const void *data, size_t size);

/* The input as a NUL-terminated string (malloc'ed; free it). Bytes after
 * an embedded NUL are kept but invisible to string functions. */
char *fuzz_strdup(const uint8_t *data, size_t size);

#endif
