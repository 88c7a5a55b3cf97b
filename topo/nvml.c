/* moekit: NVML through dlopen. Only the declarations we use are written
 * here (no nvml.h on build machines); they follow NVML's public ABI, where
 * the _v2/_v3 suffixes are the versioned symbols nvml.h maps its names to. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_FEATURE_ENABLED = 1,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
};

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, int *);
    nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
    nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned int, int *); /* r460+ */
} nvml_api;

/* dlsym returns an object pointer; copying it is the portable way to get
 * a function pointer out of it. */
static int sym(void *lib, const char *name, void *fnptr, int required, char *note,
               size_t note_len)
{
    void *p = dlsym(lib, name);
    memcpy(fnptr, &p, sizeof p);
    if (!p && required) {
        snprintf(note, note_len, "libnvidia-ml.so.1 has no %s (driver too old?)", name);
        return -1;
    }
    return 0;
}

static int open_api(nvml_api *a, char *note, size_t note_len)
{
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        snprintf(note, note_len, "NVML not available (%s)", dlerror());
        return -1;
    }
    if (sym(a->lib, "nvmlInit_v2", &a->init, 1, note, note_len) ||
        sym(a->lib, "nvmlShutdown", &a->shutdown, 1, note, note_len) ||
        sym(a->lib, "nvmlErrorString", &a->error_string, 1, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetCount_v2", &a->count, 1, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetHandleByIndex_v2", &a->handle, 1, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetPciInfo_v3", &a->pci, 1, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetName", &a->name, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetCudaComputeCapability", &a->cc, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetMemoryInfo", &a->memory, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetUUID", &a->uuid, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetMinorNumber", &a->minor, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetNvLinkState", &a->link_state, 0, note, note_len) ||
        sym(a->lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &a->link_remote_pci, 0, note,
            note_len) ||
        sym(a->lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &a->link_remote_type, 0, note,
            note_len)) {
        dlclose(a->lib);
        return -1;
    }
    return 0;
}

static void query_nvlink(const nvml_api *a, nvmlDevice_t dev, topo_nvml_gpu *g)
{
    if (!a->link_state)
        return;
    for (unsigned link = 0; link < TOPO_NVML_MAX_LINKS; link++) {
        int active = 0;
        nvmlReturn_t rc = a->link_state(dev, link, &active);
        if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT) {
            g->nvlink_known = 1; /* no NVLink, or no more links on this GPU */
            break;
        }
        if (rc != NVML_SUCCESS)
            return; /* say nothing rather than something wrong */
        g->nvlink_known = 1;
        if (active != NVML_FEATURE_ENABLED)
            continue;
        int type = -1;
        if (a->link_remote_type && a->link_remote_type(dev, link, &type) == NVML_SUCCESS &&
            type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
            g->to_switch = 1;
            continue;
        }
        nvmlPciInfo_t pci;
        unsigned d, b, s, f;
        if (a->link_remote_pci && a->link_remote_pci(dev, link, &pci) == NVML_SUCCESS &&
            topo_parse_busid(pci.busId, &d, &b, &s, &f) == 0) {
            unsigned *r = g->remote[g->n_remote++];
            r[0] = d, r[1] = b, r[2] = s, r[3] = f;
        }
    }
}

static int query_device(const nvml_api *a, unsigned index, topo_nvml_gpu *g, char *note,
                        size_t note_len)
{
    memset(g, 0, sizeof *g);
    g->cc_major = g->cc_minor = g->minor = -1;
    nvmlDevice_t dev;
    nvmlPciInfo_t pci;
    nvmlReturn_t rc = a->handle(index, &dev);
    if (rc == NVML_SUCCESS)
        rc = a->pci(dev, &pci);
    if (rc != NVML_SUCCESS) {
        snprintf(note, note_len, "NVML could not describe GPU %u: %s", index,
                 a->error_string(rc));
        return -1;
    }
    if (topo_parse_busid(pci.busId, &g->domain, &g->bus, &g->dev, &g->func)) {
        snprintf(note, note_len, "NVML gave GPU %u an unreadable PCI bus id \"%.32s\"", index,
                 pci.busId);
        return -1;
    }
    g->device_id = pci.pciDeviceId >> 16; /* device id in the high half, vendor low */
    if (a->name && a->name(dev, g->name, sizeof g->name) != NVML_SUCCESS)
        g->name[0] = '\0';
    if (a->cc && a->cc(dev, &g->cc_major, &g->cc_minor) != NVML_SUCCESS)
        g->cc_major = g->cc_minor = -1;
    nvmlMemory_t mem;
    if (a->memory && a->memory(dev, &mem) == NVML_SUCCESS)
        g->memory_bytes = mem.total, g->memory_free_bytes = mem.free;
    if (a->uuid && a->uuid(dev, g->uuid, sizeof g->uuid) != NVML_SUCCESS)
        g->uuid[0] = '\0';
    unsigned minor;
    if (a->minor && a->minor(dev, &minor) == NVML_SUCCESS)
        g->minor = (int)minor;
    query_nvlink(a, dev, g);
    return 0;
}

int topo_nvml_query(topo_nvml_report *r, char *note, size_t note_len)
{
    nvml_api a;
    r->n = 0;
    if (open_api(&a, note, note_len))
        return -1;
    int ret = -1;
    unsigned count = 0;
    nvmlReturn_t rc = a.init();
    if (rc != NVML_SUCCESS) {
        snprintf(note, note_len, "nvmlInit failed: %s", a.error_string(rc));
        goto out_close;
    }
    rc = a.count(&count);
    if (rc != NVML_SUCCESS) {
        snprintf(note, note_len, "nvmlDeviceGetCount failed: %s", a.error_string(rc));
        goto out_shutdown;
    }
    if (count > TOPO_MAX_GPUS) {
        snprintf(note, note_len, "NVML reports %u GPUs, more than moekit's limit of %d", count,
                 TOPO_MAX_GPUS);
        goto out_shutdown;
    }
    for (unsigned i = 0; i < count; i++)
        if (query_device(&a, i, &r->gpus[i], note, note_len))
            goto out_shutdown;
    r->n = (int)count;
    ret = 0;
out_shutdown:
    a.shutdown();
out_close:
    dlclose(a.lib);
    return ret;
}
