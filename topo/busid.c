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
    unsigned long a, b, c, f;
    const char *p = s;
    if (parse_hex(&p, 8, &a) || *p++ != ':' || parse_hex(&p, 2, &b))
        return -1;
    unsigned long d = 0;
    if (*p == ':') { /* domain:bus:dev.fn */
        p++;
        d = a;
        a = b;
        if (parse_hex(&p, 2, &b))
            return -1;
    }
    if (*p++ != '.' || parse_hex(&p, 1, &f))
        return -1;
    while (isspace((unsigned char)*p))
        p++;
    c = b;
    if (*p || a > 0xff || c > 0x1f || f > 7)
        return -1;
    *domain = (unsigned)d;
    *bus = (unsigned)a;
    *dev = (unsigned)c;
    *func = (unsigned)f;
    return 0;
}

void topo_format_busid(char *buf, size_t len, unsigned domain, unsigned bus, unsigned dev,
                       unsigned func)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", domain, bus, dev, func);
}

int topo_gpu_by_busid(const moe_topo *t, const char *busid)
{
    unsigned d, b, s, f;
    if (topo_parse_busid(busid, &d, &b, &s, &f))
        return -1;
    for (int i = 0; i < t->n_gpus; i++) {
        const moe_topo_gpu *g = &t->gpus[i];
        if (g->pci_domain == d && g->pci_bus == b && g->pci_dev == s && g->pci_func == f)
            return i;
    }
    return -1;
}
