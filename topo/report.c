/* moekit: moe-topo's table and JSON. */
#include "report.h"

#include <string.h>

enum { COLS = 9, CELL = TOPO_CPUS_LEN };
static const char *const heads[COLS] = {"GPU",  "PCI bus id", "Model",        "SM",    "Memory",
                                        "NUMA", "CPUs",       "NVLink peers", "Source"};

/* "xml-info" when every fact has one source, else "pci-id table (model, cc),
 * xml-info (nvlink)". */
static void sources(char *buf, size_t len, const moe_topo_gpu *g)
{
    const topo_source src[4] = {g->model_src, g->cc_src, g->memory_src, g->nvlink_src};
    static const char *const fact[4] = {"model", "cc", "memory", "nvlink"};
    int done[4] = {0};
    size_t off = 0;
    buf[0] = '\0';
    if (src[0] == src[1] && src[1] == src[2] && src[2] == src[3]) {
        snprintf(buf, len, "%s", topo_source_name(src[0]));
        return;
    }
    for (int i = 0; i < 4 && off < len; i++) {
        if (done[i])
            continue;
        off += (size_t)snprintf(buf + off, len - off, "%s%s (", off ? ", " : "",
                                topo_source_name(src[i]));
        int first = 1;
        for (int j = i; j < 4 && off < len; j++)
            if (!done[j] && src[j] == src[i]) {
                off += (size_t)snprintf(buf + off, len - off, "%s%s", first ? "" : ", ", fact[j]);
                done[j] = 1, first = 0;
            }
        if (off < len)
            off += (size_t)snprintf(buf + off, len - off, ")");
    }
}

static void row(char cells[COLS][CELL], const moe_topo_gpu *g)
{
    snprintf(cells[0], CELL, "%d", g->index);
    snprintf(cells[1], CELL, "%s", g->pci_bus_id);
    if (g->model[0])
        snprintf(cells[2], CELL, "%s", g->model);
    else
        snprintf(cells[2], CELL, "? [%04x:%04x]", g->vendor_id, g->device_id);
    verdict_sm_name(cells[3], CELL, g->cc_major, g->cc_minor);
    if (g->memory_bytes)
        snprintf(cells[4], CELL, "%llu GiB", (g->memory_bytes + (1ull << 29)) >> 30);
    else
        snprintf(cells[4], CELL, "?");
    if (g->numa_node >= 0)
        snprintf(cells[5], CELL, "%d", g->numa_node);
    else
        snprintf(cells[5], CELL, "?");
    snprintf(cells[6], CELL, "%s", g->cpus[0] ? g->cpus : "?");
    if (g->nvlink_src == TOPO_SRC_UNKNOWN)
        snprintf(cells[7], CELL, "?");
    else if (g->n_peers == 0)
        snprintf(cells[7], CELL, "none");
    else
        topo_format_index_list(cells[7], CELL, g->peers, g->n_peers);
    sources(cells[8], CELL, g);
}

/* Columns padded to their width; the last one not, so lines end clean. */
static void print_row(FILE *f, const char *const cells[COLS], const int width[COLS])
{
    for (int c = 0; c < COLS - 1; c++)
        fprintf(f, "%-*s  ", width[c], cells[c]);
    fprintf(f, "%s\n", cells[COLS - 1]);
}

void report_table(FILE *f, const moe_topo *t)
{
    fprintf(f, "node %s (%s): %d socket%s, %d cores, %d PUs, %d NUMA node%s, CPUs %s\n",
            t->hostname[0] ? t->hostname : "?", t->origin, t->n_packages,
            t->n_packages == 1 ? "" : "s", t->n_cores, t->n_pus, t->n_numa,
            t->n_numa == 1 ? "" : "s", t->cpus);
    if (!t->nvml_used)
        fprintf(f, "%s\n", t->nvml_note);
    if (t->n_gpus == 0) {
        fprintf(f, "no NVIDIA GPUs\n");
        return;
    }
    fprintf(f, "%d NVIDIA GPU%s, in CUDA order (CUDA_DEVICE_ORDER=PCI_BUS_ID):\n", t->n_gpus,
            t->n_gpus == 1 ? "" : "s");
    static char cells[TOPO_MAX_GPUS][COLS][CELL];
    int width[COLS];
    for (int c = 0; c < COLS; c++)
        width[c] = (int)strlen(heads[c]);
    for (int i = 0; i < t->n_gpus; i++) {
        row(cells[i], &t->gpus[i]);
        for (int c = 0; c < COLS; c++)
            if ((int)strlen(cells[i][c]) > width[c])
                width[c] = (int)strlen(cells[i][c]);
    }
    print_row(f, heads, width);
    for (int i = 0; i < t->n_gpus; i++) {
        const char *r[COLS];
        for (int c = 0; c < COLS; c++)
            r[c] = cells[i][c];
        print_row(f, r, width);
    }
}

void report_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_key_string(FILE *f, const char *key, const char *value, int comma)
{
    fprintf(f, "%s\"%s\": ", comma ? ", " : "", key);
    if (value && value[0])
        report_json_string(f, value);
    else
        fputs("null", f);
}

static void json_gpu(FILE *f, const moe_topo_gpu *g)
{
    char buf[64];
    fprintf(f, "{\"index\": %d, \"minor\": %d", g->index, g->minor);
    json_key_string(f, "pci_bus_id", g->pci_bus_id, 1);
    snprintf(buf, sizeof buf, "%04x:%04x", g->vendor_id, g->device_id);
    json_key_string(f, "pci_id", buf, 1);
    json_key_string(f, "model", g->model, 1);
    if (g->cc_major >= 0) {
        snprintf(buf, sizeof buf, "%d.%d", g->cc_major, g->cc_minor);
        json_key_string(f, "compute_capability", buf, 1);
        verdict_sm_name(buf, sizeof buf, g->cc_major, g->cc_minor);
        json_key_string(f, "sm", buf, 1);
    } else {
        fputs(", \"compute_capability\": null, \"sm\": null", f);
    }
    json_key_string(f, "arch", g->cc_major >= 0 ? verdict_arch_name(g->cc_major, g->cc_minor)
                                                : NULL, 1);
    if (g->memory_bytes)
        fprintf(f, ", \"memory_bytes\": %llu", g->memory_bytes);
    else
        fputs(", \"memory_bytes\": null", f);
    if (g->memory_free_bytes)
        fprintf(f, ", \"memory_free_bytes\": %llu", g->memory_free_bytes);
    else
        fputs(", \"memory_free_bytes\": null", f);
    if (g->numa_node >= 0)
        fprintf(f, ", \"numa_node\": %d", g->numa_node);
    else
        fputs(", \"numa_node\": null", f);
    json_key_string(f, "cpus", g->cpus, 1);
    if (g->nvlink_src == TOPO_SRC_UNKNOWN) {
        fputs(", \"nvlink_peers\": null", f);
    } else {
        fputs(", \"nvlink_peers\": [", f);
        for (int p = 0; p < g->n_peers; p++)
            fprintf(f, "%s%d", p ? ", " : "", g->peers[p]);
        fputs("]", f);
    }
    json_key_string(f, "uuid", g->uuid, 1);
    fputs(", \"sources\": {", f);
    json_key_string(f, "model", topo_source_name(g->model_src), 0);
    json_key_string(f, "compute_capability", topo_source_name(g->cc_src), 1);
    json_key_string(f, "memory", topo_source_name(g->memory_src), 1);
    json_key_string(f, "nvlink", topo_source_name(g->nvlink_src), 1);
    json_key_string(f, "uuid", topo_source_name(g->uuid_src), 1);
    fputs("}}", f);
}

void report_json_topology(FILE *f, const moe_topo *t)
{
    fputs("\"node\": {", f);
    json_key_string(f, "hostname", t->hostname, 0);
    json_key_string(f, "origin", t->origin, 1);
    fprintf(f, ", \"this_system\": %s, \"packages\": %d, \"cores\": %d, \"pus\": %d, "
               "\"numa_nodes\": %d",
            t->this_system ? "true" : "false", t->n_packages, t->n_cores, t->n_pus, t->n_numa);
    json_key_string(f, "cpus", t->cpus, 1);
    fprintf(f, ", \"nvml\": %s", t->nvml_used ? "true" : "false");
    json_key_string(f, "nvml_note", t->nvml_note, 1);
    fputs("},\n\"gpus\": [", f);
    for (int i = 0; i < t->n_gpus; i++) {
        fputs(i ? ",\n  " : "\n  ", f);
        json_gpu(f, &t->gpus[i]);
    }
    fputs(t->n_gpus ? "\n]" : "]", f);
}

void report_json_verdict(FILE *f, const moe_verdict *v)
{
    fprintf(f, "\"verdict\": {\"kind\": \"%s\"", v->kind == MOE_VERDICT_RUN ? "run" : "refuse");
    json_key_string(f, "precision",
                    v->kind == MOE_VERDICT_RUN ? precision_name(v->precision) : "", 1);
    fprintf(f, ", \"ep\": %d, \"dp\": %d, \"cpu_only\": %s", v->ep, v->dp,
            v->cpu_only ? "true" : "false");
    json_key_string(f, "paragraph", v->paragraph, 1);
    fputs("}", f);
}
