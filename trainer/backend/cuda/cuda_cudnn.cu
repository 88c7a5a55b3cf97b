/* moekit CUDA backend: cuDNN's graph API through dlopen (cuda_cudnn.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cudnn.h"

/* the fused attention graphs need the 9.x backend (the SDPA patterns of its
 * runtime-compiled and precompiled engines) */
#define CUDNN_MIN_VERSION 90000

static cudnn_api api;
static int load_state; /* 0 not tried, 1 loaded, -1 failed */
static char load_why[256];

static int load_symbols(void *lib)
{
#define SYM(field, name)                                                                           \
    if (!(*(void **)&api.field = dlsym(lib, name))) {                                              \
        snprintf(load_why, sizeof load_why, "symbol %s missing", name);                            \
        return -1;                                                                                 \
    }
    size_t (*get_version)(void);
    if (!(*(void **)&get_version = dlsym(lib, "cudnnGetVersion"))) {
        snprintf(load_why, sizeof load_why, "symbol cudnnGetVersion missing");
        return -1;
    }
    SYM(create, "cudnnCreate");
    SYM(destroy, "cudnnDestroy");
    SYM(set_stream, "cudnnSetStream");
    SYM(desc_create, "cudnnBackendCreateDescriptor");
    SYM(desc_destroy, "cudnnBackendDestroyDescriptor");
    SYM(finalize, "cudnnBackendFinalize");
    SYM(set, "cudnnBackendSetAttribute");
    SYM(get, "cudnnBackendGetAttribute");
    SYM(execute, "cudnnBackendExecute");
    SYM(status_string, "cudnnGetErrorString");
    SYM(last_error, "cudnnGetLastErrorString");
#undef SYM
    api.version = get_version();
    if (api.version < CUDNN_MIN_VERSION) {
        snprintf(load_why, sizeof load_why, "cuDNN %zu is older than 9.0", api.version);
        return -1;
    }
    return 0;
}

static char own_lib[4096];

void cudnn_set_lib(const char *path) { snprintf(own_lib, sizeof own_lib, "%s", path ? path : ""); }

const cudnn_api *cudnn_load(char *why, size_t n)
{
    if (!load_state) {
        const char *names[] = {own_lib, "libcudnn_graph.so.9", "libcudnn.so.9"};
        void *lib = NULL;
        for (int i = own_lib[0] ? 0 : 1; i < 3 && !lib; i++)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            snprintf(load_why, sizeof load_why, "no cuDNN 9 library (%s)", dlerror());
        load_state = lib && !load_symbols(lib) ? 1 : -1;
    }
    if (load_state < 0)
        snprintf(why, n, "%s", load_why);
    return load_state > 0 ? &api : NULL;
}

void cudnn_graph_init(cudnn_graph *g, const cudnn_api *a)
{
    memset(g, 0, sizeof *g);
    g->api = a;
    g->next_virtual_uid = 1000;
}

void cudnn_graph_free(cudnn_graph *g)
{
    if (g->plan)
        g->api->desc_destroy(g->plan);
    for (int i = g->n_descs - 1; i >= 0; i--)
        g->api->desc_destroy(g->descs[i]);
    g->n_descs = g->n_ops = 0;
    g->plan = NULL;
}

/* record the first failure: what failed, cuDNN's status and its last message */
static void fail(cudnn_graph *g, const char *what, cudnnStatus_t st)
{
    if (g->error[0])
        return;
    char msg[160] = "";
    g->api->last_error(msg, sizeof msg);
    snprintf(g->error, sizeof g->error, "%s: %s%s%s", what, g->api->status_string(st),
             msg[0] ? ": " : "", msg);
}

static cudnnBackendDescriptor_t make(cudnn_graph *g, cudnnBackendDescriptorType_t type,
                                     const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->error[0])
        return NULL;
    if (g->n_descs == CUDNN_GRAPH_MAX_DESCS) {
        snprintf(g->error, sizeof g->error, "%s: more than %d descriptors", what,
                 CUDNN_GRAPH_MAX_DESCS);
        return NULL;
    }
    cudnnStatus_t st = g->api->desc_create(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(g, what, st);
        return NULL;
    }
    g->descs[g->n_descs++] = d;
    return d;
}

static void set(cudnn_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr,
                cudnnBackendAttributeType_t type, int64_t count, const void *v, const char *name)
{
    if (g->error[0] || !d)
        return;
    cudnnStatus_t st = g->api->set(d, attr, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "cudnnBackendSetAttribute(%s)", name);
        fail(g, what, st);
    }
}
#define SET(g, d, attr, type, n, v) set(g, d, attr, type, n, v, #attr)

static void finalize(cudnn_graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->error[0] || !d)
        return;
    cudnnStatus_t st = g->api->finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) {
        char w[96];
        snprintf(w, sizeof w, "cudnnBackendFinalize(%s)", what);
        fail(g, w, st);
    }
}

static void add_op(cudnn_graph *g, cudnnBackendDescriptor_t op, const char *what)
{
    finalize(g, op, what);
    if (g->error[0])
        return;
    if (g->n_ops == CUDNN_GRAPH_MAX_OPS) {
        snprintf(g->error, sizeof g->error, "%s: more than %d operations", what,
                 CUDNN_GRAPH_MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

cudnnBackendDescriptor_t cudnn_tensor(cudnn_graph *g, int64_t uid, cudnnDataType_t type,
                                      const int64_t dim[4], const int64_t stride[4], int flags)
{
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    int64_t align = 16;
    bool virt = flags & CUDNN_T_VIRTUAL, by_value = flags & CUDNN_T_BY_VALUE;
    if (!uid)
        uid = g->next_virtual_uid++;
    SET(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    SET(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    SET(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    SET(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (virt)
        SET(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value)
        SET(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(g, t, "tensor");
    return t;
}

void cudnn_pointwise(cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    SET(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0)
        SET(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, pw, "pointwise");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b)
        SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t)
        SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(g, op, "pointwise operation");
}

void cudnn_matmul(cudnn_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c)
{
    cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    SET(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    finalize(g, mm, "matmul");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    add_op(g, op, "matmul operation");
}

void cudnn_reduction(cudnn_graph *g, cudnnReduceTensorOp_t rop, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y)
{
    cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    SET(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop);
    SET(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    finalize(g, r, "reduction");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(g, op, "reduction operation");
}

void cudnn_reshape(cudnn_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(g, op, "reshape operation");
}

/* try the heuristics' engine configurations in their order; keep the first
 * plan that finalizes */
#define CUDNN_MAX_CONFIGS 16
int cudnn_graph_plan(cudnn_graph *g, cudnnHandle_t handle)
{
    cudnnBackendDescriptor_t og = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    finalize(g, og, "operation graph");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
    SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(g, heur, "heuristics (no engine takes this graph)");
    cudnnBackendDescriptor_t cfg[CUDNN_MAX_CONFIGS];
    for (int i = 0; i < CUDNN_MAX_CONFIGS; i++)
        cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
    int64_t n_cfg = 0;
    if (!g->error[0]) {
        cudnnStatus_t st = g->api->get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_MAX_CONFIGS, &n_cfg, cfg);
        if (st != CUDNN_STATUS_SUCCESS)
            fail(g, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", st);
        else if (n_cfg == 0)
            snprintf(g->error, sizeof g->error, "cuDNN heuristics: no engine for this graph");
    }
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < n_cfg && !g->error[0] && !g->plan; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (g->api->desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
            break;
        g->api->set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        g->api->set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    1, &cfg[i]);
        last = g->api->finalize(plan);
        int64_t n = 0;
        if (last == CUDNN_STATUS_SUCCESS &&
            g->api->get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                        &g->workspace) == CUDNN_STATUS_SUCCESS)
            g->plan = plan;
        else
            g->api->desc_destroy(plan);
    }
    if (!g->error[0] && !g->plan)
        fail(g, "cudnnBackendFinalize(execution plan) for every engine configuration", last);
    return g->error[0] ? -1 : 0;
}

int cudnn_graph_execute(cudnn_graph *g, cudnnHandle_t handle, int n, const int64_t *uids,
                        void *const *ptrs, void *workspace)
{
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = g->api->desc_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(g, "cudnnBackendCreateDescriptor(variant pack)", st);
        return -1;
    }
    const char *what = "cudnnBackendSetAttribute(variant pack)";
    st = g->api->set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = g->api->set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = g->api->set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    if (st == CUDNN_STATUS_SUCCESS && (st = g->api->finalize(vp)) != CUDNN_STATUS_SUCCESS)
        what = "cudnnBackendFinalize(variant pack)";
    if (st == CUDNN_STATUS_SUCCESS && (st = g->api->execute(handle, g->plan, vp)) != CUDNN_STATUS_SUCCESS)
        what = "cudnnBackendExecute";
    if (st != CUDNN_STATUS_SUCCESS)
        fail(g, what, st);
    g->api->desc_destroy(vp);
    return st == CUDNN_STATUS_SUCCESS ? 0 : -1;
}
