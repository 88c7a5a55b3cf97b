#include "config_suggest.h"

#include <string.h>

#define SUGGEST_MAX_LEN 128

size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > SUGGEST_MAX_LEN || lb > SUGGEST_MAX_LEN)
        return (size_t)-1;
    /* One row of the DP matrix at a time: prev[j] is the distance between
     * a[0..i) and b[0..j). */
    size_t row[SUGGEST_MAX_LEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *closest_word(const char *word, const char *const *candidates, size_t n)
{
    /* Two edits always count as a typo; longer words may drift by a third
     * of their length ("hiden_sze" still finds "hidden_size"). */
    size_t limit = strlen(word) / 3;
    if (limit < 2)
        limit = 2;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        if (d < best_d && d < strlen(candidates[i])) {
            best = candidates[i];
            best_d = d;
        }
    }
    return best;
}
