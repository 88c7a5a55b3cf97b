/* moekit: the rank layout rule (see layout.h). */
#include "layout.h"

moe_layout_code layout_rule(int ranks, int ep, int dp, int experts, int *dp_out)
{
    if (ep < 1 || dp < 0)
        return MOE_LAYOUT_NOT_POSITIVE;
    if (ranks > 0) {
        if (ep > ranks)
            return MOE_LAYOUT_EP_OVER_RANKS;
        if (dp > 0 && (long long)dp * ep != ranks)
            return MOE_LAYOUT_DP_X_EP;
        if (dp == 0 && ranks % ep)
            return MOE_LAYOUT_EP_SPLITS_RANKS;
        if (dp == 0)
            dp = ranks / ep;
    }
    if (experts > 0 && experts % ep)
        return MOE_LAYOUT_EP_SPLITS_EXPERTS;
    if (dp_out)
        *dp_out = dp;
    return MOE_LAYOUT_OK;
}
