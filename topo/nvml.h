/* moekit: the few NVML facts topo/ needs, from libnvidia-ml.so.1 opened with
 * dlopen at run time. The library is never linked: a node without the
 * driver must still load the SPANK plugin and run moe-topo. */
#ifndef MOE_TOPO_NVML_H
#define MOE_TOPO_NVML_H

#include "topo.h"

#define TOPO_NVML_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS */

typedef struct {
    unsigned domain, bus, dev, func;
    unsigned device_id;        /* PCI device id (vendor 0x10de) */
    char name[96];             /* "" if NVML would not say */
    int cc_major, cc_minor;    /* -1 if NVML would not say */
    unsigned long long memory_bytes; /* 0 if NVML would not say */
    unsigned long long memory_free_bytes; /* what the driver has free now; 0 if unknown */
    char uuid[96];
    int minor;                 /* /dev/nvidiaN; -1 if NVML would not say */
    int nvlink_known;          /* NVML answered the NVLink queries (NOT_SUPPORTED counts) */
    int n_remote;              /* active links whose far end is a GPU (bus ids below) */
    unsigned remote[TOPO_NVML_MAX_LINKS][4]; /* domain, bus, dev, func */
    int to_switch;             /* some active link ends at an NVSwitch */
} topo_nvml_gpu;

typedef struct {
    int n;
    topo_nvml_gpu gpus[TOPO_MAX_GPUS];
} topo_nvml_report;

/* Ask NVML about every GPU of the node (NVML ignores CUDA_VISIBLE_DEVICES).
 * Returns 0 with r filled, or -1 with the reason in note (library missing,
 * nvmlInit failed, ...): the caller falls back to other sources. */
int topo_nvml_query(topo_nvml_report *r, char *note, size_t note_len);

#endif
