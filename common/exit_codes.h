/* moekit: exit statuses, the same in every tool (moe-train, moe-topo, the
 * job scripts that wrap them). */
#ifndef MOE_EXIT_CODES_H
#define MOE_EXIT_CODES_H

#define MOE_EXIT_OK 0
#define MOE_EXIT_FAILURE 1   /* the work failed: bad config or file, I/O, a GPU error */
#define MOE_EXIT_USAGE 2     /* the command line is wrong: unknown option, bad value, missing argument */
#define MOE_EXIT_REFUSED 3   /* moe-topo --check: the SPANK plugin would refuse this step */
#define MOE_EXIT_PREEMPTED 75 /* stopped by a signal after saving a checkpoint (EX_TEMPFAIL): requeue */

#endif
