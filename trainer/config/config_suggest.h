/* moekit: "did you mean" suggestions for mistyped keys, values and names. */
#ifndef MOE_CONFIG_SUGGEST_H
#define MOE_CONFIG_SUGGEST_H

#include <stddef.h>

/* Levenshtein distance (insert, delete, substitute each cost 1). Strings
 * longer than a key could sensibly be compare as "very far". */
size_t edit_distance(const char *a, const char *b);

/* The candidate closest to `word`, or NULL when none is close enough to be a
 * plausible typo (so a suggestion is never a random guess). */
const char *closest_word(const char *word, const char *const *candidates, size_t n);

#endif
