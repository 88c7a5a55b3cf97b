/* Short-record corpora: FASTA of contigs whose lengths are log-normal, as
 * metagenomic assemblies are (OpenGenome2's contigs: median about 2.2 kb,
 * mean about 4 kb, i.e. sigma = sqrt(2 ln(4 / 2.2)) = 1.09).
 *
 *   contigs OUT.fa[.gz] COUNT [--median BASES] [--sigma S] [--min BASES] [--max BASES]
 *           [--from GENOME.fa[.gz]] [--seed N] [--short-names]
 *
 * Bases are random ACGT (xorshift, fixed seed) or, with --from, pieces of a
 * real genome taken at seeded positions (the shipped E. coli 536 or phage
 * lambda), so a model has something to learn. --sigma 0 gives every contig
 * the median length (the store-scale measurements use 8-base records).
 * Names are "contig_<i> len=<n>", or "<i>" with --short-names (the index
 * then holds 16 bytes per record and a few of name). OUT ending in .gz is
 * gzip-compressed (level 1). Prints the count, bases, median and mean. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static double unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

/* Box-Muller: one standard normal draw */
static double normal(void)
{
    double u = unit(), v = unit();
    return sqrt(-2 * log(u > 0 ? u : 1e-300)) * cos(2 * M_PI * v);
}

/* The bases of a FASTA file (every record joined), upper-cased ACGT only. */
static char *read_genome(const char *path, size_t *n)
{
    gzFile g = gzopen(path, "rb");
    if (!g)
        return NULL;
    size_t cap = 1 << 20, len = 0;
    char *seq = malloc(cap), line[65536];
    int header = 0;
    while (seq && gzgets(g, line, sizeof line)) {
        size_t k = strlen(line);
        if (line[0] == '>' || header) {
            header = line[k - 1] != '\n'; /* a header longer than the buffer */
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            char c = line[i] & ~0x20;
            if (c != 'A' && c != 'C' && c != 'G' && c != 'T')
                continue;
            if (len == cap && !(seq = realloc(seq, cap *= 2)))
                break;
            seq[len++] = c;
        }
    }
    gzclose(g);
    *n = len;
    return seq;
}

static int usage(void)
{
    fprintf(stderr, "usage: contigs OUT.fa[.gz] COUNT [--median BASES] [--sigma S] [--min BASES] "
                    "[--max BASES] [--from GENOME.fa] [--seed N] [--short-names]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *out = argv[1], *from = NULL;
    unsigned long long count = strtoull(argv[2], NULL, 10);
    double median = 2200, sigma = 1.09;
    long long min_len = 100, max_len = 1000000;
    int short_names = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--short-names")) {
            short_names = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--median")) median = atof(v);
        else if (!strcmp(a, "--sigma")) sigma = atof(v);
        else if (!strcmp(a, "--min")) min_len = atoll(v);
        else if (!strcmp(a, "--max")) max_len = atoll(v);
        else if (!strcmp(a, "--from")) from = v;
        else if (!strcmp(a, "--seed")) rng ^= strtoull(v, NULL, 10) * 0xbf58476d1ce4e5b9ull;
        else return usage();
    }
    if (count == 0 || !(median >= 1) || sigma < 0 || min_len < 1 || max_len < min_len)
        return usage();
    size_t genome_len = 0;
    char *genome = from ? read_genome(from, &genome_len) : NULL;
    if (from && (!genome || genome_len < (size_t)max_len)) {
        fprintf(stderr, "contigs: %s: cannot read it, or it has fewer bases than --max %lld\n",
                from, max_len);
        return 1;
    }
    size_t n = strlen(out);
    int gz = n > 3 && !strcmp(out + n - 3, ".gz");
    gzFile g = gzopen(out, gz ? "wb1" : "wT");
    if (!g)
        return perror(out), 1;
    gzbuffer(g, 1 << 20);
    char *buf = malloc((size_t)max_len + 1);
    long long *lens = malloc(sizeof *lens * (count < 1000000 ? count : 1000000));
    unsigned long long total = 0;
    for (unsigned long long r = 0; r < count; r++) {
        long long len = llround(median * exp(sigma * (sigma > 0 ? normal() : 0)));
        len = len < min_len ? min_len : len > max_len ? max_len : len;
        if (r < 1000000)
            lens[r] = len;
        total += (unsigned long long)len;
        if (genome) {
            size_t at = (size_t)(next_u64() % (genome_len - (size_t)len + 1));
            memcpy(buf, genome + at, (size_t)len);
        } else {
            for (long long i = 0; i < len; i += 32) {
                uint64_t y = next_u64();
                for (int k = 0; k < 32 && i + k < len; k++, y >>= 2)
                    buf[i + k] = "ACGT"[y & 3];
            }
        }
        if (short_names)
            gzprintf(g, ">%llu\n", r);
        else
            gzprintf(g, ">contig_%llu len=%lld\n", r, len);
        for (long long i = 0; i < len; i += 80) { /* 80-column lines */
            int k = len - i < 80 ? (int)(len - i) : 80;
            gzwrite(g, buf + i, (unsigned)k);
            gzputc(g, '\n');
        }
    }
    if (gzclose(g) != Z_OK)
        return fprintf(stderr, "%s: write failed\n", out), 1;
    /* the median of the first million lengths */
    size_t m = count < 1000000 ? (size_t)count : 1000000;
    long long lo = min_len, hi = max_len;
    while (lo < hi) { /* the smallest length with at least half the sample at or below it */
        long long mid = lo + (hi - lo) / 2;
        size_t below = 0;
        for (size_t i = 0; i < m; i++)
            below += lens[i] <= mid;
        if (2 * below >= m)
            hi = mid;
        else
            lo = mid + 1;
    }
    printf("%s: %llu contigs, %llu bases, median %lld, mean %.0f\n", out, count, total, lo,
           (double)total / (double)count);
    free(buf);
    free(lens);
    free(genome);
    return 0;
}
