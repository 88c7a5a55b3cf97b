/* moekit: merging GPU facts from NVML and the PCI id table into moe_topo. */
#include "facts.h"

#include "gpu_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_peer(moe_topo_gpu *g, int peer)
{
    for (int i = 0; i < g->n_peers; i++)
        if (g->peers[i] == peer)
            return;
    g->peers[g->n_peers++] = peer;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int topo_merge_nvml(moe_topo *t, const topo_nvml_report *r, moe_err *e)
{
    int of_nvml[TOPO_MAX_GPUS]; /* NVML device -> index in t->gpus */
    for (int k = 0; k < r->n; k++) {
        const topo_nvml_gpu *n = &r->gpus[k];
        int i = topo_gpu_at(t, n->domain, n->bus, n->dev, n->func);
        if (i < 0) {
            /* hwloc did not list it (no PCI discovery): the GPU is real, so
             * keep it, with unknown locality. */
            if (t->n_gpus == TOPO_MAX_GPUS)
                return moe_errf(e, "more than %d NVIDIA GPUs on this node", TOPO_MAX_GPUS);
            i = t->n_gpus++;
            moe_topo_gpu *g = &t->gpus[i];
            memset(g, 0, sizeof *g);
            g->pci_domain = n->domain, g->pci_bus = n->bus, g->pci_dev = n->dev;
            g->pci_func = n->func;
            topo_format_busid(g->pci_bus_id, sizeof g->pci_bus_id, n->domain, n->bus, n->dev,
                              n->func);
            g->vendor_id = 0x10de;
            g->device_id = n->device_id;
            g->cc_major = g->cc_minor = -1;
            g->numa_node = -1;
            g->minor = -1;
        }
        of_nvml[k] = i;
        moe_topo_gpu *g = &t->gpus[i];
        if (n->name[0]) {
            snprintf(g->model, sizeof g->model, "%s", n->name);
            g->model_src = TOPO_SRC_NVML;
        }
        if (n->cc_major >= 0) {
            g->cc_major = n->cc_major, g->cc_minor = n->cc_minor;
            g->cc_src = TOPO_SRC_NVML;
        }
        if (n->memory_bytes) {
            g->memory_bytes = n->memory_bytes;
            g->memory_src = TOPO_SRC_NVML;
        }
        if (n->memory_free_bytes) {
            g->memory_free_bytes = n->memory_free_bytes;
            g->memory_free_src = TOPO_SRC_NVML;
        }
        if (n->uuid[0]) {
            snprintf(g->uuid, sizeof g->uuid, "%s", n->uuid);
            g->uuid_src = TOPO_SRC_NVML;
        }
        if (n->minor >= 0)
            g->minor = n->minor;
    }
    /* NVLink: direct GPU-GPU links name the far GPU; links into an NVSwitch
     * make every other switch-attached GPU of the node a peer. */
    for (int k = 0; k < r->n; k++) {
        const topo_nvml_gpu *n = &r->gpus[k];
        if (!n->nvlink_known)
            continue;
        moe_topo_gpu *g = &t->gpus[of_nvml[k]];
        g->n_peers = 0;
        g->nvlink_src = TOPO_SRC_NVML;
        for (int l = 0; l < n->n_remote; l++) {
            const unsigned *rb = n->remote[l];
            int p = topo_gpu_at(t, rb[0], rb[1], rb[2], rb[3]);
            if (p >= 0 && p != of_nvml[k])
                add_peer(g, p);
        }
        if (n->to_switch)
            for (int m = 0; m < r->n; m++)
                if (m != k && r->gpus[m].to_switch)
                    add_peer(g, of_nvml[m]);
        qsort(g->peers, (size_t)g->n_peers, sizeof g->peers[0], cmp_int);
    }
    return 0;
}

void topo_fill_from_table(moe_topo *t)
{
    for (int i = 0; i < t->n_gpus; i++) {
        moe_topo_gpu *g = &t->gpus[i];
        const gpu_table_entry *row = gpu_table_lookup(g->device_id);
        if (!row)
            continue;
        if (!g->model[0]) {
            snprintf(g->model, sizeof g->model, "%s", row->model);
            g->model_src = TOPO_SRC_PCI_TABLE;
        }
        if (g->cc_major < 0) {
            g->cc_major = row->cc_major, g->cc_minor = row->cc_minor;
            g->cc_src = TOPO_SRC_PCI_TABLE;
        }
        if (!g->memory_bytes && row->memory_mib) {
            g->memory_bytes = (unsigned long long)row->memory_mib << 20;
            g->memory_src = TOPO_SRC_PCI_TABLE;
        }
        if (g->nvlink_src == TOPO_SRC_UNKNOWN && !row->nvlink) {
            g->n_peers = 0; /* a PCIe-only part: no peers, and we know it */
            g->nvlink_src = TOPO_SRC_PCI_TABLE;
        }
    }
}

static int cmp_bus(const void *a, const void *b)
{
    const moe_topo_gpu *x = a, *y = b;
    unsigned kx[4] = {x->pci_domain, x->pci_bus, x->pci_dev, x->pci_func};
    unsigned ky[4] = {y->pci_domain, y->pci_bus, y->pci_dev, y->pci_func};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i])
            return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

void topo_sort_gpus(moe_topo *t)
{
    /* Peers hold indices: remember every GPU's old index, sort, remap. */
    for (int i = 0; i < t->n_gpus; i++)
        t->gpus[i].index = i;
    qsort(t->gpus, (size_t)t->n_gpus, sizeof t->gpus[0], cmp_bus);
    int new_of_old[TOPO_MAX_GPUS];
    for (int i = 0; i < t->n_gpus; i++)
        new_of_old[t->gpus[i].index] = i;
    for (int i = 0; i < t->n_gpus; i++) {
        moe_topo_gpu *g = &t->gpus[i];
        g->index = i;
        if (g->minor < 0)
            g->minor = i;
        for (int p = 0; p < g->n_peers; p++)
            g->peers[p] = new_of_old[g->peers[p]];
        qsort(g->peers, (size_t)g->n_peers, sizeof g->peers[0], cmp_int);
    }
}
