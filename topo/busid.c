/* moekit: PCI bus ids, the key that joins hwloc, NVML and CUDA views of a GPU.
 * NVML writes an 8-digit domain in upper case ("00000000:1B:00.0"), hwloc a
 * 4-digit one in lower case; comparing parsed numbers avoids both traps. */
#include "topo.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

static int parse_hex(const char **p, unsigned max_digits, unsigned long *out)
{
    const char *s = *p;
    unsigned long v = 0;
    unsigned n = 0;
    while (isxdigit((unsigned char)*s) && n < max_digits) {
        int c = tolower((unsigned char)*s);
        v = v * 16 + (unsigned long)(isdigit(c) ? c - '0' : c - 'a' + 10);
        s++, n++;
    }
    if (n == 0 || isxdigit((unsigned char)*s))
        return -1;
    *p = s;
    *out = v;
    return 0;
}

int topo_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *dev,
                     unsigned *func)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    /* Two or three ':'-separated fields, then '.' and the function: the
     * last two fields are bus and device, a first of three the domain. */
    unsigned long field[3], fn;
    int n = 0;
    const char *p = s;
    for (;;) {
        if (n == 3 || parse_hex(&p, n == 0 ? 8 : 2, &field[n]))
            return -1;
        n++;
        if (*p != ':')
            break;
        p++;
    }
    if (n < 2 || *p++ != '.' || parse_hex(&p, 1, &fn))
        return -1;
    while (isspace((unsigned char)*p))
        p++;
    unsigned long b = field[n - 2], d = field[n - 1];
    if (*p || b > 0xff || d > 0x1f || fn > 7)
        return -1;
    *domain = n == 3 ? (unsigned)field[0] : 0;
    *bus = (unsigned)b;
    *dev = (unsigned)d;
    *func = (unsigned)fn;
    return 0;
}

void topo_format_busid(char *buf, size_t len, unsigned domain, unsigned bus, unsigned dev,
                       unsigned func)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", domain, bus, dev, func);
}

int topo_gpu_at(const moe_topo *t, unsigned domain, unsigned bus, unsigned dev, unsigned func)
{
    for (int i = 0; i < t->n_gpus; i++) {
        const moe_topo_gpu *g = &t->gpus[i];
        if (g->pci_domain == domain && g->pci_bus == bus && g->pci_dev == dev &&
            g->pci_func == func)
            return i;
    }
    return -1;
}

int topo_gpu_by_busid(const moe_topo *t, const char *busid)
{
    unsigned d, b, s, f;
    if (topo_parse_busid(busid, &d, &b, &s, &f))
        return -1;
    return topo_gpu_at(t, d, b, s, f);
}
