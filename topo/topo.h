/* moekit: what a node has, as a plain struct.
 *
 * topo_load() runs hwloc 2.x once (live, or from a saved `lstopo --of xml`
 * export) and copies out what moekit needs: sockets, cores, PUs, NUMA nodes,
 * and every NVIDIA GPU (PCI vendor 0x10de, class 0x0300 VGA or 0x0302 3D)
 * with its PCI bus id, NUMA node, local CPUs, model, compute capability,
 * memory and NVLink peers. No hwloc handle outlives the call.
 *
 * Where GPU facts come from, best first (each fact records its source):
 *   "nvml"          libnvidia-ml.so.1, opened with dlopen at run time (never
 *                   linked, so nodes without a driver still load moekit), and
 *                   only when hwloc says the topology is this machine's: a
 *                   saved XML of another node must not be mixed with the
 *                   local driver's answers. Set HWLOC_THISSYSTEM=1 to assert
 *                   that an XML describes the machine it is read on.
 *   "xml-info"      <info name="moe.*"> attributes on the GPU's PCIDev object
 *                   in a topology XML (hwloc keeps them), standing in for
 *                   NVML on test nodes: moe.model, moe.cc ("10.0"),
 *                   moe.memory_mib, moe.memory_free_mib (what NVML would
 *                   report free), moe.uuid ("GPU-..."), moe.nvlink_peers
 *                   (comma-separated PCI bus ids of the GPUs it is NVLinked
 *                   to; NVSwitch nodes list every other GPU).
 *   "pci-id table"  moekit's table of NVIDIA PCI device ids (gpu_table.c).
 *   "unknown"       none of the above.
 *
 * GPU order: t->gpus[] is sorted by PCI bus id. That is CUDA's order under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID, which moekit assumes and its launcher sets
 * (CUDA's default, FASTEST_FIRST, only agrees on nodes of one GPU model).
 * Slurm's GPU indices (SLURM_STEP_GPUS, SLURM_JOB_GPUS) are the minor
 * numbers of /dev/nvidiaN; the driver numbers them in PCI order, so minor =
 * position in this array unless NVML reports otherwise. */
#ifndef MOE_TOPO_H
#define MOE_TOPO_H

#include "../common/err.h"

#define TOPO_MAX_GPUS 64
#define TOPO_CPUS_LEN 1024

typedef enum {
    TOPO_SRC_UNKNOWN = 0,
    TOPO_SRC_NVML,
    TOPO_SRC_XML_INFO,
    TOPO_SRC_PCI_TABLE,
    TOPO_SRC_HWLOC,            /* what hwloc's own NVML/CUDA components wrote into the XML */
} topo_source;

typedef struct {
    int index;                 /* position in PCI bus order = CUDA device number on the node */
    int minor;                 /* /dev/nvidiaN, what Slurm's GPU indices name */
    char pci_bus_id[32];       /* "0000:1b:00.0", lower-case, 4-digit domain */
    unsigned pci_domain, pci_bus, pci_dev, pci_func;
    unsigned vendor_id, device_id, class_id;

    char model[128];           /* "NVIDIA B200"; "" if unknown */
    topo_source model_src;
    int cc_major, cc_minor;    /* -1 if unknown */
    topo_source cc_src;
    unsigned long long memory_bytes; /* 0 if unknown */
    topo_source memory_src;
    /* free now, as the driver says (NVML; moe.memory_free_mib in test XML): what a
     * run started now may take; 0 if unknown (a login node: the card's total then) */
    unsigned long long memory_free_bytes;
    topo_source memory_free_src;
    char uuid[96];             /* "GPU-...", "" if unknown */
    topo_source uuid_src;

    int numa_node;             /* the one NUMA node local to the GPU; -1 if unknown or several */
    char cpus[TOPO_CPUS_LEN];  /* local CPUs as a list, "0-15,32-47"; "" if unknown */

    int n_peers;               /* GPUs reachable over NVLink, as indices into gpus[] */
    int peers[TOPO_MAX_GPUS];
    topo_source nvlink_src;    /* UNKNOWN: nobody could say (not "no NVLink") */
} moe_topo_gpu;

typedef struct {
    char origin[4200];         /* "live" or "xml FILE" (HWLOC_XMLFILE included) */
    int this_system;           /* hwloc's verdict: the topology is the machine we run on */
    char hostname[256];
    int n_packages, n_cores, n_pus, n_numa;
    char cpus[TOPO_CPUS_LEN];  /* every CPU of the node as a list */
    int nvml_used;             /* NVML answered for this topology */
    char nvml_note[256];       /* why NVML was not used, when it was not */
    int n_gpus;
    moe_topo_gpu gpus[TOPO_MAX_GPUS];
} moe_topo;

/* Flags for topo_load. */
#define TOPO_NO_NVML 1u        /* do not try NVML even on a live node */

/* Discover the node. xml_path NULL: live discovery, which hwloc itself turns
 * into an XML load when HWLOC_XMLFILE is set. The struct is large (about
 * 110 KiB): allocate it, do not put it on a small stack. */
int topo_load(moe_topo *t, const char *xml_path, unsigned flags, moe_err *e);

/* "nvml", "xml-info", "pci-id table" or "unknown". */
const char *topo_source_name(topo_source s);

/* A compute capability as hwloc XML and moe.cc write it: "9.0", "10.3"
 * (one or two digits without a leading 0, '.', one digit). 0, or -1. */
int topo_parse_cc(const char *s, int *major, int *minor);

/* PCI bus ids: accepts "D:B:S.F" with a domain of any width ("00000000:1B:00.0"
 * as NVML writes it, "0000:1b:00.0" as hwloc does) or "B:S.F" (domain 0).
 * Writes the canonical "%04x:%02x:%02x.%x" form. */
int topo_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *dev,
                     unsigned *func);
void topo_format_busid(char *buf, size_t len, unsigned domain, unsigned bus, unsigned dev,
                       unsigned func);
/* Index in t->gpus of the GPU at this PCI address, or -1; the second takes
 * a bus id in any accepted spelling. */
int topo_gpu_at(const moe_topo *t, unsigned domain, unsigned bus, unsigned dev, unsigned func);
int topo_gpu_by_busid(const moe_topo *t, const char *busid);

/* Integer lists as Slurm and CUDA_VISIBLE_DEVICES write them: "0,1",
 * "0-3", "0-1,4". Empty entries, negative numbers, reversed ranges and
 * duplicates are errors; `what` names the source in messages
 * ("SLURM_STEP_GPUS"). */
int topo_parse_index_list(const char *s, const char *what, int *out, int max, int *n_out,
                          moe_err *e);
/* The reverse, compressing runs: {1,2,3,5} -> "1-3,5". */
void topo_format_index_list(char *buf, size_t len, const int *v, int n);

#endif
