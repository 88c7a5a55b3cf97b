/* moekit: the administrator's policy, from the plugin's arguments in
 * plugstack.conf:
 *
 *   required /usr/lib/moekit/moekit.so trainer=/opt/moekit/bin/moe-train \
 *            on_non_blackwell=bf16 allow_cpu=no
 *
 * Keys, values and defaults (a key may be given once):
 *   trainer=PATH              the moe-train binary; absolute.
 *                             Default PREFIX/bin/moe-train beside the plugin (or
 *                             moe-topo) as installed, the build's for a build-tree one.
 *   configs=DIR               where --moe-config names resolve; absolute.
 *                             Default PREFIX/share/moekit/configs (install_dirs.h).
 *   data=DIR                  where the trainer finds data.files, passed as
 *                             MOE_DATA_DIR; absolute. Default PREFIX/share/moekit/data.
 *   on_non_blackwell=bf16|reject
 *                             steps whose GPUs are not all data-centre Blackwell:
 *                             train in BF16 (default) or refuse them whatever
 *                             precision was asked. CPU-only steps follow allow_cpu.
 *   allow_user_configs=yes|no config paths outside configs= (default no).
 *   allow_cpu=yes|no          train on nodes without GPUs, FP32 CPU backend (default no).
 *   allow_fp8_block=yes|no    Hopper (sm_90) may train in FP8 with block scaling (default no).
 *   topology_xml=FILE         read this saved hwloc XML instead of discovering the
 *                             node; absolute. Default: live discovery.
 *   bind=yes|no               bind each task to its GPU's NUMA node and CPUs (default yes).
 *   refuse_memory_short=yes|no
 *                             a run whose memory plan (moe-train --plan) does not fit a GPU
 *                             is refused (yes) or warned about (no, the default).
 *   planner_timeout=SECONDS   how long the plugin waits for the trainer's answers
 *                             (`trainer query`: the config's facts, the memory plan)
 *                             before it kills it and refuses the step; 1..600,
 *                             default MOE_PLANNER_TIMEOUT_DEFAULT.
 * Unknown keys, bad values, duplicates and words without "=" are errors that
 * name the argument. */
#ifndef MOE_POLICY_H
#define MOE_POLICY_H

#include <stddef.h>

#include "verdict.h"

#define MOE_PLANNER_TIMEOUT_DEFAULT 30
#define MOE_PLANNER_TIMEOUT_MAX 600

/* The defaults above. */
void policy_defaults(moe_policy *pol);

/* Defaults, then every argument in order. On error returns -1 and says
 * which argument (1-based, as counted after the plugin path) and why. */
int policy_parse(moe_policy *pol, int argc, char *const argv[], moe_err *e);

/* The same from one string of blank-separated words, as moe-topo --policy
 * takes them ("on_non_blackwell=reject allow_cpu=yes"). Values cannot hold
 * blanks (plugstack.conf splits on them too). */
int policy_parse_string(moe_policy *pol, const char *words, moe_err *e);

/* The policy as key=value words, every key, for logs and moe-topo. */
void policy_format(const moe_policy *pol, char *buf, size_t len);

#endif
