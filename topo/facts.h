/* moekit: filling in GPU facts after hwloc found the devices. Each fact
 * keeps the best source that answered: NVML, then the topology XML's
 * moe.* info, then the PCI id table. */
#ifndef MOE_TOPO_FACTS_H
#define MOE_TOPO_FACTS_H

#include "nvml.h"
#include "topo.h"

/* Take NVML's answers for the GPUs it knows (matched by PCI bus id), and
 * add GPUs NVML sees but hwloc did not (hwloc without its PCI plugin). */
int topo_merge_nvml(moe_topo *t, const topo_nvml_report *r, moe_err *e);

/* Fill what is still unknown from the PCI device id. */
void topo_fill_from_table(moe_topo *t);

/* Sort t->gpus by PCI bus id and renumber index (and minor, where NVML did
 * not give one). Peer lists are remapped. */
void topo_sort_gpus(moe_topo *t);

#endif
