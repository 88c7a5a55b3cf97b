/* moekit: GPU facts from the PCI device id, for nodes where NVML cannot
 * answer (no driver, or a saved topology of another node). */
#ifndef MOE_GPU_TABLE_H
#define MOE_GPU_TABLE_H

typedef struct {
    unsigned device_id;        /* PCI device id, vendor 0x10de */
    const char *model;         /* the name NVML reports for the part */
    int cc_major, cc_minor;
    unsigned memory_mib;       /* as NVML reports it on the common SKU; 0 = varies */
    int nvlink;                /* 0: the part has no NVLink at all, so "no peers" is known */
} gpu_table_entry;

/* The entry for an NVIDIA PCI device id, or NULL. */
const gpu_table_entry *gpu_table_lookup(unsigned device_id);

#endif
