/* A synthetic FASTA corpus for measuring moe-data prepare and training on
 * large stores: N files of random ACGT (xorshift, fixed seed), 80-column
 * lines, R records per file; every other file gzipped (zlib level 1).
 *   cc -O2 bench/data/synth_fasta.c -lz -o /tmp/synth_fasta
 *   /tmp/synth_fasta DIR FILES BASES_PER_FILE RECORDS_PER_FILE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: synth_fasta DIR FILES BASES_PER_FILE RECORDS_PER_FILE\n");
        return 2;
    }
    int files = atoi(argv[2]), recs = atoi(argv[4]);
    long long bases = atoll(argv[3]), per = bases / recs;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    static char line[81];
    for (int f = 0; f < files; f++) {
        char path[4096];
        int gz = f % 2 == 1;
        snprintf(path, sizeof path, "%s/part%05d.fa%s", argv[1], f, gz ? ".gz" : "");
        gzFile g = gzopen(path, gz ? "wb1" : "wT");
        if (!g)
            return perror(path), 1;
        gzbuffer(g, 1 << 20);
        for (int r = 0; r < recs; r++) {
            gzprintf(g, ">synthetic_%d_%d random ACGT\n", f, r);
            for (long long done = 0; done < per;) {
                int n = per - done < 80 ? (int)(per - done) : 80;
                for (int i = 0; i < n; i += 32) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    uint64_t y = x;
                    for (int k = 0; k < 32 && i + k < n; k++, y >>= 2)
                        line[i + k] = "ACGT"[y & 3];
                }
                line[n] = '\n';
                gzwrite(g, line, (unsigned)n + 1);
                done += n;
            }
        }
        if (gzclose(g) != Z_OK)
            return fprintf(stderr, "%s: write failed\n", path), 1;
    }
    return 0;
}
