/* moekit: hwloc discovery of a node into moe_topo. */
#include "facts.h"
#include "topo.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *topo_source_name(topo_source s)
{
    switch (s) {
    case TOPO_SRC_NVML: return "nvml";
    case TOPO_SRC_XML_INFO: return "xml-info";
    case TOPO_SRC_PCI_TABLE: return "pci-id table";
    case TOPO_SRC_HWLOC: return "hwloc";
    default: return "unknown";
    }
}

static int is_nvidia_gpu(hwloc_obj_t o)
{
    /* 0x0300 VGA (consumer cards), 0x0302 3D controller (data-centre parts,
     * which have no display engine). NVSwitches and audio functions share
     * the vendor id but not the class. */
    return o->attr->pcidev.vendor_id == 0x10de &&
           (o->attr->pcidev.class_id == 0x0300 || o->attr->pcidev.class_id == 0x0302);
}

/* Where a GPU sits: the nearest CPU-side ancestor's cpuset and, when that
 * covers exactly one NUMA node, the node. */
static void locality(hwloc_topology_t topo, hwloc_obj_t o, moe_topo_gpu *g)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
    g->numa_node = -1;
    g->cpus[0] = '\0';
    if (!anc)
        return;
    if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
        g->numa_node = hwloc_bitmap_first(anc->nodeset);
    if (anc->cpuset)
        hwloc_bitmap_list_snprintf(g->cpus, sizeof g->cpus, anc->cpuset);
}

int topo_parse_cc(const char *s, int *major, int *minor)
{
    /* Strictly "M.m" or "MM.m": sscanf would take "+10.0" and "9.10". */
    const char *dot = strchr(s, '.');
    size_t nmaj = dot ? (size_t)(dot - s) : 0;
    if (!dot || nmaj < 1 || nmaj > 2 || strspn(s, "0123456789") != nmaj || dot[1] < '0' ||
        dot[1] > '9' || dot[2] || s[0] == '0')
        return -1;
    *major = nmaj == 1 ? s[0] - '0' : (s[0] - '0') * 10 + (s[1] - '0');
    *minor = dot[1] - '0';
    return 0;
}

/* The moe.* info attributes a topology XML may carry for a GPU. */
static int xml_facts(hwloc_obj_t o, moe_topo_gpu *g, const char *origin, moe_err *e)
{
    const char *v;
    if ((v = hwloc_obj_get_info_by_name(o, "moe.model")) && *v) {
        snprintf(g->model, sizeof g->model, "%s", v);
        g->model_src = TOPO_SRC_XML_INFO;
    }
    if ((v = hwloc_obj_get_info_by_name(o, "moe.cc"))) {
        int maj, min;
        if (topo_parse_cc(v, &maj, &min) < 0)
            return moe_errf(e, "%s: GPU %s: moe.cc=\"%s\" is not a compute capability like "
                               "\"10.0\" (one or two digits, '.', one digit)", origin,
                            g->pci_bus_id, v);
        g->cc_major = maj, g->cc_minor = min;
        g->cc_src = TOPO_SRC_XML_INFO;
    }
    if ((v = hwloc_obj_get_info_by_name(o, "moe.memory_mib"))) {
        char *end;
        errno = 0;
        unsigned long long mib = strtoull(v, &end, 10);
        if (errno || end == v || *end || mib == 0 || mib > (1ull << 40))
            return moe_errf(e, "%s: GPU %s: moe.memory_mib=\"%s\" is not a positive number of "
                               "MiB", origin, g->pci_bus_id, v);
        g->memory_bytes = mib << 20;
        g->memory_src = TOPO_SRC_XML_INFO;
    }
    if ((v = hwloc_obj_get_info_by_name(o, "moe.memory_free_mib"))) {
        char *end;
        errno = 0;
        unsigned long long mib = strtoull(v, &end, 10);
        if (errno || end == v || *end || mib > (1ull << 40))
            return moe_errf(e, "%s: GPU %s: moe.memory_free_mib=\"%s\" is not a number of MiB",
                            origin, g->pci_bus_id, v);
        g->memory_free_bytes = mib << 20;
        g->memory_free_src = TOPO_SRC_XML_INFO;
    }
    if ((v = hwloc_obj_get_info_by_name(o, "moe.uuid")) && *v) {
        if (strncmp(v, "GPU-", 4) != 0)
            return moe_errf(e, "%s: GPU %s: moe.uuid=\"%s\" must start with \"GPU-\" as NVML "
                               "writes it", origin, g->pci_bus_id, v);
        snprintf(g->uuid, sizeof g->uuid, "%s", v);
        g->uuid_src = TOPO_SRC_XML_INFO;
    }
    return 0;
}

/* moe.nvlink_peers: bus ids of the GPUs this one is NVLinked to. Resolved
 * once every GPU is known. */
static int xml_peers(hwloc_obj_t o, moe_topo *t, int i, moe_err *e)
{
    const char *v = hwloc_obj_get_info_by_name(o, "moe.nvlink_peers");
    if (!v)
        return 0;
    moe_topo_gpu *g = &t->gpus[i];
    g->nvlink_src = TOPO_SRC_XML_INFO;
    g->n_peers = 0;
    char buf[TOPO_MAX_GPUS * 20];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int p = topo_gpu_by_busid(t, tok);
        if (p < 0 || p == i)
            return moe_errf(e, "%s: GPU %s: moe.nvlink_peers names \"%s\", which is %s",
                            t->origin, g->pci_bus_id, tok,
                            p == i ? "the GPU itself" : "not an NVIDIA GPU of this topology");
        for (int k = 0; k < g->n_peers; k++)
            if (g->peers[k] == p)
                return moe_errf(e, "%s: GPU %s: moe.nvlink_peers names %s twice", t->origin,
                                g->pci_bus_id, tok);
        g->peers[g->n_peers++] = p;
    }
    return 0;
}

/* What hwloc's NVML and CUDA components write on a GPU's OS devices
 * ("nvml0", "cuda0") in an `lstopo --of xml` export of a node where they
 * ran: GPUModel, NVIDIAUUID, CUDAGlobalMemorySize (KiB). moe.* info, read
 * before, wins. */
static void hwloc_osdev_facts(hwloc_obj_t pci, moe_topo_gpu *g)
{
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE)
            continue;
        const char *v;
        if (!g->model[0] && (v = hwloc_obj_get_info_by_name(c, "GPUModel")) && *v) {
            snprintf(g->model, sizeof g->model, "%s", v);
            g->model_src = TOPO_SRC_HWLOC;
        }
        if (!g->uuid[0] && (v = hwloc_obj_get_info_by_name(c, "NVIDIAUUID")) &&
            strncmp(v, "GPU-", 4) == 0) {
            snprintf(g->uuid, sizeof g->uuid, "%s", v);
            g->uuid_src = TOPO_SRC_HWLOC;
        }
        if (!g->memory_bytes && (v = hwloc_obj_get_info_by_name(c, "CUDAGlobalMemorySize"))) {
            char *end;
            errno = 0;
            unsigned long long kib = strtoull(v, &end, 10);
            if (!errno && end != v && !*end && kib > 0 && kib < (1ull << 40)) {
                g->memory_bytes = kib << 10;
                g->memory_src = TOPO_SRC_HWLOC;
            }
        }
    }
}

static int gpu_of_obj(hwloc_obj_t o, hwloc_obj_t *const objs, int n)
{
    hwloc_obj_t pci = (o && o->type == HWLOC_OBJ_OS_DEVICE) ? o->parent : o;
    for (int i = 0; i < n; i++)
        if (objs[i] == pci)
            return i;
    return -1;
}

static void add_peer(moe_topo_gpu *g, int p)
{
    for (int k = 0; k < g->n_peers; k++)
        if (g->peers[k] == p)
            return;
    g->peers[g->n_peers++] = p;
}

/* hwloc's NVML component writes NVLink as the "NVLinkBandwidth" distances
 * (MB/s) between GPUs, and to NVSwitches where links go through them: two
 * GPUs are peers when linked directly or to one switch. GPUs the matrix
 * covers get a known answer (no peers is "no NVLink"); moe.nvlink_peers,
 * read before, wins. */
static void hwloc_nvlinks(hwloc_topology_t topo, moe_topo *t, hwloc_obj_t *const objs)
{
    unsigned nr = 1;
    struct hwloc_distances_s *d = NULL;
    if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &d, 0) < 0 || nr == 0)
        return;
    unsigned n = d->nbobjs;
    int gpu[TOPO_MAX_GPUS * 2];
    if (n <= sizeof gpu / sizeof gpu[0]) {
        /* >= 0 a GPU; -1 a switch (an I/O or Misc object, as hwloc puts
         * NVSwitches); -2 anything else (a CPU with NVLink, or a GPU whose
         * peers moe.nvlink_peers gave) */
        for (unsigned k = 0; k < n; k++) {
            hwloc_obj_t o = d->objs[k];
            gpu[k] = gpu_of_obj(o, objs, t->n_gpus);
            if (gpu[k] >= 0 && t->gpus[gpu[k]].nvlink_src != TOPO_SRC_UNKNOWN)
                gpu[k] = -2;
            else if (gpu[k] >= 0)
                t->gpus[gpu[k]].nvlink_src = TOPO_SRC_HWLOC;
            else
                gpu[k] = (o && (hwloc_obj_type_is_io(o->type) || o->type == HWLOC_OBJ_MISC))
                             ? -1
                             : -2;
        }
        for (unsigned a = 0; a < n; a++)
            for (unsigned b = 0; b < n; b++) {
                if (a == b || gpu[a] < 0 || d->values[a * n + b] == 0)
                    continue;
                if (gpu[b] >= 0) /* GPU to GPU */
                    add_peer(&t->gpus[gpu[a]], gpu[b]);
                else if (gpu[b] == -1) /* GPU to a switch: every GPU on that switch */
                    for (unsigned c = 0; c < n; c++)
                        if (c != a && gpu[c] >= 0 && d->values[c * n + b] > 0)
                            add_peer(&t->gpus[gpu[a]], gpu[c]);
            }
    }
    hwloc_distances_release(topo, d);
}

static int collect_gpus(hwloc_topology_t topo, moe_topo *t, moe_err *e)
{
    hwloc_obj_t objs[TOPO_MAX_GPUS];
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
        if (!is_nvidia_gpu(o))
            continue;
        if (t->n_gpus == TOPO_MAX_GPUS)
            return moe_errf(e, "%s: more than %d NVIDIA GPUs", t->origin, TOPO_MAX_GPUS);
        moe_topo_gpu *g = &t->gpus[t->n_gpus];
        memset(g, 0, sizeof *g);
        const struct hwloc_pcidev_attr_s *pa = &o->attr->pcidev;
        g->pci_domain = pa->domain, g->pci_bus = pa->bus, g->pci_dev = pa->dev;
        g->pci_func = pa->func;
        topo_format_busid(g->pci_bus_id, sizeof g->pci_bus_id, pa->domain, pa->bus, pa->dev,
                          pa->func);
        g->vendor_id = pa->vendor_id, g->device_id = pa->device_id, g->class_id = pa->class_id;
        g->cc_major = g->cc_minor = -1;
        g->minor = -1;
        locality(topo, o, g);
        if (xml_facts(o, g, t->origin, e))
            return -1;
        hwloc_osdev_facts(o, g);
        objs[t->n_gpus++] = o;
    }
    for (int i = 0; i < t->n_gpus; i++)
        if (xml_peers(objs[i], t, i, e))
            return -1;
    hwloc_nvlinks(topo, t, objs);
    return 0;
}

static void node_summary(hwloc_topology_t topo, moe_topo *t)
{
    t->n_packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    t->n_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->n_pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    t->n_numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    hwloc_bitmap_list_snprintf(t->cpus, sizeof t->cpus, root->cpuset);
    const char *host = hwloc_obj_get_info_by_name(root, "HostName");
    if (host)
        snprintf(t->hostname, sizeof t->hostname, "%s", host);
    else if (t->this_system && gethostname(t->hostname, sizeof t->hostname - 1) != 0)
        t->hostname[0] = '\0';
}

static int load_hwloc(moe_topo *t, const char *xml_path, moe_err *e)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo))
        return moe_err_errno(e, errno, "hwloc_topology_init");
    int ret = -1;
    /* GPUs are I/O objects, which hwloc drops unless asked. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc's NVML component puts NVSwitches in as Misc objects, the far end
     * of the GPUs' NVLinkBandwidth; dropped by default, and the matrix with them. */
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (xml_path) {
        if (access(xml_path, R_OK) != 0) {
            moe_err_errno(e, errno, "topology XML %s", xml_path);
            goto out;
        }
        if (hwloc_topology_set_xml(topo, xml_path)) {
            moe_errf(e, "topology XML %s: hwloc cannot read it (is it an `lstopo --of xml` "
                        "export?)", xml_path);
            goto out;
        }
    }
    if (hwloc_topology_load(topo)) {
        moe_errf(e, "%s: hwloc could not load the topology (is it an `lstopo --of xml` "
                    "export?)", t->origin);
        goto out;
    }
    t->this_system = hwloc_topology_is_thissystem(topo);
    node_summary(topo, t);
    ret = collect_gpus(topo, t, e);
out:
    hwloc_topology_destroy(topo);
    return ret;
}

int topo_load(moe_topo *t, const char *xml_path, unsigned flags, moe_err *e)
{
    memset(t, 0, sizeof *t);
    /* hwloc reads HWLOC_XMLFILE itself when no XML is given; name it. */
    const char *env_xml = getenv("HWLOC_XMLFILE");
    if (xml_path)
        snprintf(t->origin, sizeof t->origin, "xml %s", xml_path);
    else if (env_xml && *env_xml)
        snprintf(t->origin, sizeof t->origin, "xml %s (HWLOC_XMLFILE)", env_xml);
    else
        snprintf(t->origin, sizeof t->origin, "live");
    if (load_hwloc(t, xml_path, e))
        return -1;

    if (flags & TOPO_NO_NVML) {
        snprintf(t->nvml_note, sizeof t->nvml_note, "NVML not queried (asked not to)");
    } else if (!t->this_system) {
        snprintf(t->nvml_note, sizeof t->nvml_note,
                 "NVML not queried: the topology is not this machine's "
                 "(set HWLOC_THISSYSTEM=1 if it is)");
    } else {
        topo_nvml_report *r = malloc(sizeof *r);
        if (!r)
            return moe_errf(e, "out of memory");
        if (topo_nvml_query(r, t->nvml_note, sizeof t->nvml_note) == 0) {
            t->nvml_used = 1;
            if (topo_merge_nvml(t, r, e)) {
                free(r);
                return moe_err_prefix(e, "%s", t->origin);
            }
        }
        free(r);
    }
    topo_sort_gpus(t);
    topo_fill_from_table(t);
    return 0;
}
