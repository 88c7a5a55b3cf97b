/* moekit: NVIDIA data-centre and common workstation GPUs by PCI device id.
 *
 * Ids are from the PCI ID repository (pci-ids.ucw.cz) and NVIDIA's driver
 * README "supported GPUs" list; compute capabilities from NVIDIA's CUDA GPU
 * list. Entries marked "unverified" were not checked against a real device
 * or a primary source: NVML's answer always wins over this table, and a
 * wrong row here can at worst make a Blackwell node fall back to BF16 or
 * the reverse, so keep the marks honest. Memory is what NVML reports
 * (MiB) on the usual SKU; 0 where SKUs differ. The last column is 0 for
 * parts without NVLink (PCIe-only cards), 1 for parts that have it. */
#include "gpu_table.h"

#include <stddef.h>

static const gpu_table_entry table[] = {
    /* Blackwell, compute capability 10.x: the MXFP8 parts. */
    {0x2901, "NVIDIA B200", 10, 0, 183359, 1},
    {0x2941, "NVIDIA GB200", 10, 0, 0, 1},        /* unverified id; memory varies by board */
    {0x29bc, "NVIDIA B100", 10, 0, 0, 1},         /* unverified */
    {0x3182, "NVIDIA B300 SXM6 AC", 10, 3, 0, 1}, /* unverified */
    {0x31c2, "NVIDIA GB300", 10, 3, 0, 1},        /* unverified */
    /* Blackwell consumer/workstation, compute capability 12.0: no MXFP8 in
     * moekit (its kernels need sm_100's tensor-core path). */
    {0x2b85, "NVIDIA GeForce RTX 5090", 12, 0, 32607, 0},
    {0x2c02, "NVIDIA GeForce RTX 5080", 12, 0, 16303, 0},             /* unverified memory */
    {0x2bb1, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 12, 0, 0, 0}, /* unverified */
    {0x2bb5, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 12, 0, 0, 0},      /* unverified */
    /* Hopper, compute capability 9.0. */
    {0x2330, "NVIDIA H100 80GB HBM3", 9, 0, 81559, 1},
    {0x2336, "NVIDIA H100", 9, 0, 0, 1}, /* pci.ids "GH100 [H100]"; SKU (memory) varies */
    {0x2339, "NVIDIA H100", 9, 0, 0, 1}, /* pci.ids "GH100 [H100]"; SKU (memory) varies */
    {0x2331, "NVIDIA H100 PCIe", 9, 0, 81559, 1},
    {0x2321, "NVIDIA H100 NVL", 9, 0, 95830, 1},
    {0x2324, "NVIDIA H800", 9, 0, 81559, 1},      /* unverified memory */
    {0x2322, "NVIDIA H800 PCIe", 9, 0, 81559, 1}, /* unverified memory */
    {0x2329, "NVIDIA H20", 9, 0, 0, 1},           /* unverified */
    {0x2335, "NVIDIA H200", 9, 0, 143771, 1},
    {0x233b, "NVIDIA H200 NVL", 9, 0, 143771, 1}, /* unverified */
    {0x2342, "NVIDIA GH200 480GB", 9, 0, 0, 1},   /* unverified; memory varies */
    /* Ada Lovelace, 8.9. */
    {0x26b9, "NVIDIA L40S", 8, 9, 46068, 0},
    {0x26b5, "NVIDIA L40", 8, 9, 46068, 0},
    {0x27b8, "NVIDIA L4", 8, 9, 23034, 0},
    {0x26b1, "NVIDIA RTX 6000 Ada Generation", 8, 9, 49140, 0},
    {0x2684, "NVIDIA GeForce RTX 4090", 8, 9, 24564, 0},
    {0x2704, "NVIDIA GeForce RTX 4080", 8, 9, 16376, 0},
    /* Ampere, 8.0 (data centre) and 8.6. */
    {0x20b0, "NVIDIA A100-SXM4-40GB", 8, 0, 40960, 1},
    {0x20b2, "NVIDIA A100-SXM4-80GB", 8, 0, 81920, 1},
    {0x20b1, "NVIDIA A100-PCIE-40GB", 8, 0, 40960, 1},
    {0x20f1, "NVIDIA A100-PCIE-40GB", 8, 0, 40960, 1},
    {0x20b5, "NVIDIA A100 80GB PCIe", 8, 0, 81920, 1},
    {0x20f3, "NVIDIA A800-SXM4-80GB", 8, 0, 81920, 1},
    {0x20b7, "NVIDIA A30", 8, 0, 24576, 1}, /* unverified memory */
    {0x2236, "NVIDIA A10", 8, 6, 23028, 0},
    {0x2235, "NVIDIA A40", 8, 6, 46068, 1},
    {0x2230, "NVIDIA RTX A6000", 8, 6, 49140, 1},
    {0x2204, "NVIDIA GeForce RTX 3090", 8, 6, 24576, 1}, /* unverified memory */
    /* Turing and Volta: listed so the verdict can name them and refuse. */
    {0x1eb8, "Tesla T4", 7, 5, 15360, 0},
    {0x1db1, "Tesla V100-SXM2-16GB", 7, 0, 16384, 1}, /* unverified memory */
    {0x1db5, "Tesla V100-SXM2-32GB", 7, 0, 32768, 1}, /* unverified memory */
    {0x1db4, "Tesla V100-PCIE-16GB", 7, 0, 16384, 0}, /* unverified memory */
    {0x1db6, "Tesla V100-PCIE-32GB", 7, 0, 32768, 0}, /* unverified memory */
};

const gpu_table_entry *gpu_table_lookup(unsigned device_id)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].device_id == device_id)
            return &table[i];
    return NULL;
}
