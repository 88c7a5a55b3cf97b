/* moekit: the rank layout rule, one pure function for every place that
 * checks it (the plugin before queueing and on the node, moe-topo --check,
 * the config validator, the trainer's rank layout). Each caller words its
 * own message from the code.
 *
 * One rank per GPU (or per task on CPUs). EP ranks form an expert-parallel
 * group; the experts split evenly over it; DP = ranks / EP groups. The
 * groups are contiguous ranks (group g is ranks [g EP, (g+1) EP)), so a
 * group sits inside a node whenever EP divides the ranks per node; a larger
 * EP spans nodes, which is allowed. */
#ifndef MOE_LAYOUT_H
#define MOE_LAYOUT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MOE_LAYOUT_OK = 0,
    MOE_LAYOUT_NOT_POSITIVE,     /* EP < 1 or DP < 0 */
    MOE_LAYOUT_EP_OVER_RANKS,    /* EP larger than the ranks */
    MOE_LAYOUT_DP_X_EP,          /* DP given, and DP x EP is not the ranks */
    MOE_LAYOUT_EP_SPLITS_RANKS,  /* DP not given, and EP does not divide the ranks */
    MOE_LAYOUT_EP_SPLITS_EXPERTS /* EP does not divide the experts */
} moe_layout_code;

/* Check EP (>= 1) and DP (0 = ranks / EP) for `ranks` ranks and `experts`
 * experts; ranks <= 0 or experts <= 0 mean unknown, and the checks that
 * need them pass. The rank checks come before the expert check. On
 * MOE_LAYOUT_OK, *dp_out (may be NULL) is DP (0 when it stays unknown). */
moe_layout_code layout_rule(int ranks, int ep, int dp, int experts, int *dp_out);

#ifdef __cplusplus
}
#endif

#endif
