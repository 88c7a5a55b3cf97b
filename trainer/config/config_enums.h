/* moekit: the closed choices of a run configuration, as the runtime holds
 * them. Each enum is indexed like its name table, which is the schema's list
 * of choices (config_schema.c): the words config files, overrides, saved
 * configs and command-line options use. Code compares the enum, never the
 * text. */
#ifndef MOE_CONFIG_ENUMS_H
#define MOE_CONFIG_ENUMS_H

/* optimizer.moments_dtype: the storage of AdamW's two moments */
typedef enum { MOE_MOMENTS_DTYPE_FP32 = 0, MOE_MOMENTS_DTYPE_BF16 } moe_moments_dtype;
/* precision.layers: which GEMMs run in the low-precision recipe */
typedef enum { MOE_LAYERS_EXPERTS = 0, MOE_LAYERS_ALL } moe_lowp_layers;
/* runtime.backend and --backend */
typedef enum { MOE_BACKEND_AUTO = 0, MOE_BACKEND_CPU, MOE_BACKEND_CUDA } moe_backend_choice;
/* data.pack: moe_pack_mode in data/data_cfg.h, below the config */
#include "../data/data_cfg.h"
/* runtime.gemm: the library of the bf16 GEMMs */
typedef enum { MOE_RT_GEMM_CUBLASLT = 0, MOE_RT_GEMM_CUBLAS } moe_rt_gemm;
/* runtime.attention, in the order tried: cuDNN's fused flash attention, then
 * moekit's own kernels */
typedef enum {
    MOE_RT_ATTN_CUDNN = 0, MOE_RT_ATTN_MMA, MOE_RT_ATTN_WMMA, MOE_RT_ATTN_SIMT
} moe_rt_attention;
/* runtime.init_on */
typedef enum { MOE_RT_INIT_DEVICE = 0, MOE_RT_INIT_HOST } moe_rt_init_on;
/* runtime.memory_check */
typedef enum { MOE_RT_MEMCHECK_REFUSE = 0, MOE_RT_MEMCHECK_WARN, MOE_RT_MEMCHECK_OFF } moe_rt_memory_check;

/* NULL-terminated, indexed by the enums above */
extern const char *const config_moments_dtype_names[];
extern const char *const config_layers_names[];
extern const char *const config_backend_names[];
extern const char *const config_pack_names[];

#endif
