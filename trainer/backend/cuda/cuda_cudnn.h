/* moekit CUDA backend: cuDNN's graph (backend) API, loaded at run time.
 *
 * cuDNN is opened with dlopen on first use, so moe-train starts on a node
 * without it (the attention then runs on moekit's own kernels). An operation
 * graph is written descriptor by descriptor into a cudnn_graph, which owns
 * every descriptor it made; the first failing call is kept, named, in
 * `error`, and later calls do nothing, so a builder checks once at the end. */
#ifndef MOE_CUDA_CUDNN_H
#define MOE_CUDA_CUDNN_H

#include <cudnn_graph.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t version; /* cudnnGetVersion(), e.g. 91900 */
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*desc_create)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*desc_destroy)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*get)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                         cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    const char *(*status_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
} cudnn_api;

/* The library file cudnn_load opens instead of the default sonames
 * (runtime.cudnn_lib; NULL or "" for the sonames). Copied; it counts only
 * before the first cudnn_load. */
void cudnn_set_lib(const char *path);
/* The process's cuDNN (loaded once: cudnn_set_lib's file, else
 * libcudnn_graph.so.9, else libcudnn.so.9). NULL when absent or too old,
 * with the reason in `why`. */
const cudnn_api *cudnn_load(char *why, size_t n);

#define CUDNN_GRAPH_MAX_DESCS 160
#define CUDNN_GRAPH_MAX_OPS 48
enum { CUDNN_T_VIRTUAL = 1, CUDNN_T_BY_VALUE = 2 };

typedef struct {
    const cudnn_api *api;
    cudnnBackendDescriptor_t descs[CUDNN_GRAPH_MAX_DESCS]; /* every one made, to destroy */
    int n_descs;
    cudnnBackendDescriptor_t ops[CUDNN_GRAPH_MAX_OPS];
    int n_ops;
    int64_t next_virtual_uid;
    cudnnBackendDescriptor_t plan; /* after cudnn_graph_plan */
    int64_t workspace;
    char error[320]; /* the first failure, "" if none */
} cudnn_graph;

void cudnn_graph_init(cudnn_graph *g, const cudnn_api *api);
void cudnn_graph_free(cudnn_graph *g);
/* a 4-d tensor; uid 0 with CUDNN_T_VIRTUAL takes the next internal uid */
cudnnBackendDescriptor_t cudnn_tensor(cudnn_graph *g, int64_t uid, cudnnDataType_t type,
                                      const int64_t dim[4], const int64_t stride[4], int flags);
/* y = mode(x[, b][, t]) computed in `prec`; axis >= 0 for GEN_INDEX */
void cudnn_pointwise(cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis);
void cudnn_matmul(cudnn_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c);
void cudnn_reduction(cudnn_graph *g, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y);
void cudnn_reshape(cudnn_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);
/* the operation graph's execution plan: the first of the heuristics' engine
 * configurations that finalizes (g->plan, g->workspace); 0 on success */
int cudnn_graph_plan(cudnn_graph *g, cudnnHandle_t handle);
/* run the plan on the variant pack (uids[i] -> ptrs[i]); 0 on success,
 * else the reason in g->error */
int cudnn_graph_execute(cudnn_graph *g, cudnnHandle_t handle, int n, const int64_t *uids,
                        void *const *ptrs, void *workspace);

#endif
