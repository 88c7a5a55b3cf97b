/* moekit data: what a run asks of its training data (the config's data
 * section). Defined here, below the config, so that the data code takes its
 * settings without knowing the config; trainer/config/ fills it from the
 * data.* keys. */
#ifndef MOE_DATA_CFG_H
#define MOE_DATA_CFG_H

/* the longest path any config key holds, terminator included */
#define MOE_PATH_MAX 4096

/* data.pack and eval's --pack (config_enums.h names them) */
typedef enum { MOE_PACK_AUTO = 0, MOE_PACK_PACKED, MOE_PACK_PADDED } moe_pack_mode;

typedef struct {
    const char *store;        /* a token store directory (moe-data prepare --out) */
    double weight;            /* its share of the training windows (> 0; normalised) */
} moe_blend_entry;

typedef struct {
    int n_files;
    const char *const *files; /* data.files: FASTA / FASTA.gz files, directories, globs,
                                 @lists; relative paths resolve against the moekit data
                                 dir. No cap: the list lives outside the struct
                                 (config_intern.h), equal lists at equal addresses. */
    char store[MOE_PATH_MAX]; /* data.store: a token store; replaces data.files */
    int n_blend;
    const moe_blend_entry *blend; /* data.blend: stores with weights; replaces data.files */
    int stride;               /* data.stride: window start spacing (0 = seq_length) */
    double val_fraction;      /* data.val_fraction: held-out share of every record */
    double reverse_complement; /* data.reverse_complement: probability per window */
    int mask_degenerate_bases; /* data.mask_degenerate_bases (bool): no loss on non-ACGT targets */
    int shuffle;              /* data.shuffle (bool) */
    moe_pack_mode pack;       /* data.pack: auto|packed|padded (data.h: windows) */
} moe_data_cfg;

#endif
