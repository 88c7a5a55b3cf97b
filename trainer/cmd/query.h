/* moekit: `moe-train query`, the questions the SPANK plugin asks the
 * installed trainer instead of linking it.
 *
 *   moe-train query --config-facts --config PATH --configs-dir DIR [key=value ...]
 *   moe-train query --plan-fit --config PATH --configs-dir DIR --precision P
 *                   --ep E --dp D --room-bytes N [--room-what TEXT] [--refuse]
 *                   [key=value ...]
 *
 * The plugin (spank_moe.so, loaded into slurmstepd) runs this as a child
 * process with the user's rights (plugin/planner.h) and reads one line from
 * its stdout: one flat JSON object, written only here, in the grammar
 * plugin/planner.c parses (keys and string, integer or boolean values; no
 * nesting, no floats):
 *
 *   {"moekit_query":1,"ok":true,"num_experts":8,"ep":8,"dp":1,"precision":"mxfp8"}
 *   {"moekit_query":1,"ok":true,"fit":"fits","message":""}
 *   {"moekit_query":1,"ok":true,"fit":"refuse","message":"L1_8x7B_ep at EP=4 ..."}
 *   {"moekit_query":1,"ok":false,"error":"config 'x.cfg' line 3: ..."}
 *
 * --config-facts: what the plugin needs from a config loaded with the
 * overrides (config_load: model.num_experts, parallel.ep, parallel.dp and
 * precision.compute); a bad config or override is "ok":false with
 * config_load's message. --plan-fit: plan_fit_config at the verdict's
 * precision, EP and DP against a GPU of --room-bytes ("fits", "warn", or
 * "refuse" with --refuse, the policy's refuse_memory_short=yes; "message"
 * holds the rows and what would fit); a plan that cannot be made is
 * "ok":false. Either answer exits 0; a bad command line exits 2 with the
 * reason on stderr and nothing on stdout. --room-what completes the
 * message's "but ... %.1f GiB" ("GPU 3 has free"; default "a GPU has").
 * "moekit_query" is the grammar's version: a change that an older plugin
 * could misread gets a new number. */
#ifndef MOE_QUERY_H
#define MOE_QUERY_H

#include <stdio.h>

/* argv[0] is "query". Returns the exit status. */
int query_main(int argc, char **argv);

/* The options, for moe-train --help. */
void query_print_options(FILE *f);

#endif
