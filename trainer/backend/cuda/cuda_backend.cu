/* moekit CUDA backend: device, memory, conversions, GEMM helpers, the table. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "../../../common/device_peak.h"
#include "../../../common/host_wait.h"
#include "../../lowp/fp8_gemm.h"
#include "cuda_internal.h"
#include "cuda_cudnn.h"
#include "cuda_fp8_weight_cache.h"

void cuda_note(moe_backend *be, const char *op, const char *what)
{
    cuda_ctx *c = CTX(be);
    if (!c->error[0])
        snprintf(c->error, sizeof c->error, "cuda %s: %s", op, what);
}

int cuda_check(moe_backend *be, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    cudaError_t async = cudaGetLastError();
    if (async != cudaSuccess)
        cuda_note(be, "kernel", cudaGetErrorString(async));
    if (!c->error[0])
        return 0;
    moe_errf(e, "%s (on %s)", c->error, c->device_name);
    c->error[0] = 0;
    return -1;
}

void *cuda_scratch(moe_backend *be, int i, size_t bytes)
{
    cuda_ctx *c = CTX(be);
    if (c->scratch_bytes[i] >= bytes)
        return c->scratch[i];
    if (c->scratch[i])
        cudaFree(c->scratch[i]);
    c->scratch[i] = NULL;
    c->scratch_bytes[i] = 0;
    size_t want = cuda_scratch_grown(bytes);
    if (cudaMalloc(&c->scratch[i], want) != cudaSuccess) {
        char what[128];
        snprintf(what, sizeof what, "cannot allocate %zu bytes of scratch", want);
        cuda_note(be, "scratch", what);
        return NULL;
    }
    c->scratch_bytes[i] = want;
    return c->scratch[i];
}

/* ---- the host's waits and copies (cuda_internal.h) ---- */

/* Polled, not cudaStreamSynchronize: the host stays responsive (the
 * watchdog, a peer's abort) and the wait shows as what it is. Spins a few
 * microseconds first, as most waits at the end of a short queue are. */
static cudaError_t poll_done(cudaStream_t st)
{
    for (int i = 0;; i++) {
        cudaError_t q = cudaStreamQuery(st);
        if (q != cudaErrorNotReady)
            return q;
        if (i > 64)
            usleep(i < 2000 ? 5 : 50);
    }
}

cudaError_t cuda_wait(moe_backend *be, const char *what)
{
    host_wait_begin(what);
    cudaError_t err = poll_done(CTX(be)->stream);
    host_wait_end();
    return err;
}

cudaError_t cuda_to_host(moe_backend *be, void *dst, const void *src, size_t bytes,
                         const char *what)
{
    be->host_bytes[1] += bytes;
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, CTX(be)->stream);
    if (err != cudaSuccess || !what)
        return err;
    return cuda_wait(be, what);
}

/* The pinned ring: each slot's copy is queued behind the work before it,
 * and the slot is taken again only once that copy has left it. */
cudaError_t cuda_from_host(moe_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = CTX(be);
    be->host_bytes[0] += bytes;
    cudaError_t err = cudaSuccess;
    for (size_t done = 0; done < bytes && err == cudaSuccess;) {
        size_t n = bytes - done < CUDA_STAGE_BYTES ? bytes - done : CUDA_STAGE_BYTES;
        int s = c->stage_next;
        c->stage_next = (s + 1) % CUDA_STAGE_SLOTS;
        if (cudaEventQuery(c->stage_ev[s]) == cudaErrorNotReady) {
            host_wait_begin("upload staging");
            err = cudaEventSynchronize(c->stage_ev[s]);
            host_wait_end();
        }
        char *slot = c->stage + (size_t)s * CUDA_STAGE_BYTES;
        if (err == cudaSuccess) {
            memcpy(slot, (const char *)src + done, n);
            err = cudaMemcpyAsync((char *)dst + done, slot, n, cudaMemcpyHostToDevice, c->stream);
        }
        if (err == cudaSuccess)
            err = cudaEventRecord(c->stage_ev[s], c->stream);
        done += n;
    }
    return err;
}

/* ---- queues and events (backend.h's contract): a moe_queue is a
 * cudaStream_t, a moe_event a cudaEvent_t ---- */

static cudaStream_t stream_of(moe_backend *be, moe_queue *q)
{
    return q ? (cudaStream_t)q : CTX(be)->stream;
}

static moe_queue *cu_queue_create(moe_backend *be, moe_err *e)
{
    cudaStream_t st;
    cudaError_t err = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        moe_errf(e, "cuda: cannot make a stream on %s: %s", CTX(be)->device_name,
                 cudaGetErrorString(err));
        return NULL;
    }
    return (moe_queue *)st;
}

static void cu_queue_destroy(moe_backend *be, moe_queue *q)
{
    (void)be;
    if (q)
        cudaStreamDestroy((cudaStream_t)q);
}

static moe_event *cu_event_create(moe_backend *be, moe_err *e)
{
    cudaEvent_t ev;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err != cudaSuccess) {
        moe_errf(e, "cuda: cannot make an event on %s: %s", CTX(be)->device_name,
                 cudaGetErrorString(err));
        return NULL;
    }
    return (moe_event *)ev;
}

static void cu_event_destroy(moe_backend *be, moe_event *ev)
{
    (void)be;
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

static int cu_event_record(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e)
{
    cudaError_t err = cudaEventRecord((cudaEvent_t)ev, stream_of(be, q));
    if (err != cudaSuccess)
        return moe_errf(e, "cudaEventRecord: %s", cudaGetErrorString(err));
    return 0;
}

static int cu_event_wait(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e)
{
    cudaError_t err = cudaStreamWaitEvent(stream_of(be, q), (cudaEvent_t)ev, 0);
    if (err != cudaSuccess)
        return moe_errf(e, "cudaStreamWaitEvent: %s", cudaGetErrorString(err));
    return 0;
}

/* A copy between ranks as NCCL makes one: a kernel on the queue, not a
 * copy-engine transfer, which the driver may put behind other streams' copies
 * (the in-process ranks share one process's copy channels) and so order it
 * after producers no event named. 16 bytes a load where both ends allow. */
__global__ void copy_between_kernel(char *dst, const char *src, size_t n, int wide)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    size_t head = wide ? n / 16 : 0;
    for (size_t k = i; k < head; k += step)
        ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
    for (size_t k = head * 16 + i; k < n; k += step)
        dst[k] = src[k];
}

static int cu_copy_on(moe_backend *be, moe_queue *q, void *dst, const void *src, size_t bytes,
                      moe_err *e)
{
    if (!bytes || dst == src)
        return 0;
    cuda_wcache_wrote(be, dst, bytes);
    int wide = (((uintptr_t)dst | (uintptr_t)src) & 15) == 0;
    copy_between_kernel<<<cuda_grid(wide ? (bytes + 15) / 16 : bytes), CUDA_THREADS, 0,
                          stream_of(be, q)>>>((char *)dst, (const char *)src, bytes, wide);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return moe_errf(e, "cuda copy of %zu bytes between ranks: %s", bytes,
                        cudaGetErrorString(err));
    return 0;
}

/* one thread spinning on the SM clock: the queue is busy, the GPU is not */
__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static int cu_spin(moe_backend *be, moe_queue *q, double us, moe_err *e)
{
    if (!(us > 0))
        return 0;
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, CTX(be)->device);
    long long cycles = (long long)(us * (khz > 0 ? khz : 1500000) / 1000.0);
    spin_kernel<<<1, 1, 0, stream_of(be, q)>>>(cycles);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return moe_errf(e, "cuda spin kernel: %s", cudaGetErrorString(err));
    return 0;
}

/* ---- memory ---- */

static void *cu_alloc(moe_backend *be, size_t bytes, moe_err *e)
{
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 16);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        moe_errf(e, "cuda: cannot allocate %.2f GiB (%s; %.2f of %.2f GiB free on %s)",
                 bytes / 1073741824.0, cudaGetErrorString(err), free_b / 1073741824.0,
                 total_b / 1073741824.0, CTX(be)->device_name);
        return NULL;
    }
    if (alloc_ledger_add(&CTX(be)->live, be->mem_bytes, p, bytes, be->mem_kind)) {
        cudaFree(p);
        moe_errf(e, "out of host memory for the allocation table");
        return NULL;
    }
    return p;
}

/* be->mem_bytes holds what is allocated now: a buffer freed (the moments of
 * another dtype, a staging bucket) leaves the start-up's figure */
static void cu_free(moe_backend *be, void *p)
{
    if (!p)
        return;
    const alloc_ledger *l = &CTX(be)->live;
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].p == p)
            cuda_wcache_forget(be, p, l->e[i].bytes); /* its weights' FP8 copies with it */
    alloc_ledger_remove(&CTX(be)->live, be->mem_bytes, p);
    cudaFree(p);
}
static size_t cu_act_bytes(moe_backend *be, size_t n) { return n * sizeof(bf16); }

static int cu_upload(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e)
{
    cuda_wcache_wrote(be, dst, bytes);
    cudaError_t err = cuda_from_host(be, dst, src, bytes);
    if (err != cudaSuccess)
        return moe_errf(e, "cuda upload of %zu bytes: %s", bytes, cudaGetErrorString(err));
    return cuda_check(be, e);
}

static int cu_download(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e)
{
    cudaError_t err = cuda_to_host(be, dst, src, bytes, "download");
    if (err != cudaSuccess)
        return moe_errf(e, "cuda download of %zu bytes: %s", bytes, cudaGetErrorString(err));
    return cuda_check(be, e);
}

static void *cu_pinned_alloc(moe_backend *be, size_t bytes, moe_err *e)
{
    void *p = NULL;
    cudaError_t err = cudaMallocHost(&p, bytes);
    if (err != cudaSuccess) {
        moe_errf(e, "cuda: cannot pin %zu bytes of host memory: %s", bytes, cudaGetErrorString(err));
        return NULL;
    }
    return p;
}

static void cu_pinned_free(moe_backend *be, void *p) { cudaFreeHost(p); }

static void cu_memset0(moe_backend *be, void *p, size_t bytes)
{
    cuda_wcache_wrote(be, p, bytes);
    CU(be, "memset", cudaMemsetAsync(p, 0, bytes, CTX(be)->stream));
}

/* host memory, pinned or not: a copy from or to it crosses PCIe */
static int is_host_memory(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* not an error: a pointer CUDA does not know is host memory */
        return 1;
    }
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
}

static int cu_owns(moe_backend *be, const void *p)
{
    (void)be;
    return p && !is_host_memory(p);
}

static int cu_copy(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e)
{
    if (!bytes || dst == src)
        return 0;
    int dst_host = is_host_memory(dst);
    if (dst_host != is_host_memory(src))
        be->host_bytes[dst_host] += bytes;
    if (!dst_host)
        cuda_wcache_wrote(be, dst, bytes);
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CTX(be)->stream);
    if (err == cudaSuccess && dst_host) /* the caller reads it next */
        err = cuda_wait(be, "copy to host");
    if (err != cudaSuccess)
        return moe_errf(e, "cuda copy of %zu bytes: %s", bytes, cudaGetErrorString(err));
    return 0;
}

__global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const bf16 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}


static int cu_act_from_real(moe_backend *be, act *dst, const real *src, size_t n, moe_err *e)
{
    float *tmp = (float *)cuda_scratch(be, 7, n * sizeof(float));
    if (!tmp)
        return cuda_check(be, e);
    if (cu_upload(be, tmp, src, n * sizeof(float), e))
        return -1;
    cuda_wcache_wrote(be, dst, n * sizeof(bf16));
    f32_to_bf16_kernel<<<cuda_grid(n), CUDA_THREADS, 0, CTX(be)->stream>>>((bf16 *)dst, tmp, n);
    LAUNCHED(be, "act_from_real");
    return cuda_check(be, e);
}

static int cu_act_to_real(moe_backend *be, real *dst, const act *src, size_t n, moe_err *e)
{
    float *tmp = (float *)cuda_scratch(be, 7, n * sizeof(float));
    if (!tmp)
        return cuda_check(be, e);
    bf16_to_f32_kernel<<<cuda_grid(n), CUDA_THREADS, 0, CTX(be)->stream>>>(tmp, (const bf16 *)src, n);
    LAUNCHED(be, "act_to_real");
    return cu_download(be, dst, tmp, n * sizeof(float), e);
}

static void cu_weights_from_master(moe_backend *be, act *wc, const real *master, size_t n)
{
    cuda_wcache_weights_changed(be);
    f32_to_bf16_kernel<<<cuda_grid(n), CUDA_THREADS, 0, CTX(be)->stream>>>((bf16 *)wc, master, n);
    LAUNCHED(be, "weights_from_master");
}

static int cu_sync(moe_backend *be, moe_err *e)
{
    cudaError_t err = cuda_wait(be, "sync");
    if (err != cudaSuccess)
        cuda_note(be, "synchronize", cudaGetErrorString(err));
    return cuda_check(be, e);
}

static void cu_destroy(moe_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (c->stream)
        cudaStreamSynchronize(c->stream); /* nothing queued outlives its buffers */
    for (int i = 0; i < CUDA_SCRATCH_SLOTS; i++)
        if (c->scratch[i])
            cudaFree(c->scratch[i]);
    cuda_wcache_destroy(be);
    lowp_fp8_gemm_destroy(c->fp8_gemm);
    for (int i = 0; i < CUDA_ADAM_LAYOUTS; i++) {
        if (c->adam[i].chunks)
            cudaFree(c->adam[i].chunks);
        free(c->adam[i].spans);
    }
    if (c->shard_chunks)
        cudaFree(c->shard_chunks);
    free(c->shard_pieces);
    alloc_ledger_free(&c->live);
    if (c->d_partial)
        cudaFree(c->d_partial);
    for (int i = 0; i < 2; i++)
        if (c->d_ranges[i])
            cudaFree(c->d_ranges[i]);
    if (c->d_loss)
        cudaFree(c->d_loss);
    if (c->d_bad)
        cudaFree(c->d_bad);
    cudaFreeHost(c->h_partial);
    cudaFreeHost(c->h_loss);
    cudaFreeHost(c->h_idx);
    cudaFreeHost(c->h_rows);
    cudaFreeHost(c->h_slots);
    cuda_gemm_destroy(be);
    cuda_attention_cudnn_destroy(be);
    if (c->blas)
        cublasDestroy(c->blas);
    for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
        if (c->stage_ev[i])
            cudaEventDestroy(c->stage_ev[i]);
    cudaFreeHost(c->stage);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    free(be);
}

extern "C" int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error here */
        return 0;
    }
    return n;
}

extern "C" int cuda_backend_available(void) { return cuda_device_count() > 0; }

/* the GEMM library switches at once (cuBLASLt's handle and plans made or
 * dropped); the FP8 values reach the kernels through the ctx. The chunk
 * sizes come validated (config_validate: runtime.*_chunk_rows). */
static int cu_set_run_opts(moe_backend *be, const moe_backend_opts *o, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    assert(o->fp8_chunk_rows >= MOE_CHUNK_ROWS_ALIGN && o->fp8_chunk_rows % MOE_CHUNK_ROWS_ALIGN == 0);
    assert(o->expert_chunk_rows >= MOE_CHUNK_ROWS_ALIGN &&
           o->expert_chunk_rows % MOE_CHUNK_ROWS_ALIGN == 0);
    if (o->gemm == MOE_RT_GEMM_CUBLAS && c->lt)
        cuda_gemm_destroy(be); /* c->lt NULL: every GEMM through cublasGemmEx */
    else if (o->gemm == MOE_RT_GEMM_CUBLASLT && !c->lt && cuda_gemm_init(be, e))
        return -1;
    c->fp8_gemms = o->fp8_gemms;
    c->fp8_chunk_rows = o->fp8_chunk_rows;
    c->expert_chunk_rows = o->expert_chunk_rows;
    c->fp8_fused_save = o->fp8_fused_save != 0;
    c->attention = o->attention;
    cudnn_set_lib(o->cudnn_lib);
    cuda_wcache_set(be, o->fp8_weight_cache != 0);
    return 0;
}

static size_t cu_mem_in_use(moe_backend *be)
{
    (void)be;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return 0;
    return total_b - free_b;
}

static size_t cu_mem_free(moe_backend *be)
{
    (void)be;
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? free_b : 0;
}

/* the GPU's dense peak for the recipe the run computes in (device_peak.h) */
static double cu_peak_tflops(moe_backend *be, moe_precision p)
{
    const cuda_ctx *c = (const cuda_ctx *)be->ctx;
    return device_peak_tflops(c->cc_major, c->cc_minor, p);
}

extern "C" int cuda_backend_create(moe_backend **out, int device, moe_err *e)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess)
        return moe_errf(e, "cuda: no usable GPU (%s)", cudaGetErrorString(err));
    if (device >= n)
        return moe_errf(e, "cuda: device %d requested but %d visible", device, n);
    if ((err = cudaSetDevice(device)) != cudaSuccess)
        return moe_errf(e, "cuda: cannot use device %d: %s", device, cudaGetErrorString(err));
    moe_backend *be = (moe_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return moe_errf(e, "out of memory");
    }
    be->ctx = c;
    c->device = device;
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    char name[200];
    snprintf(name, sizeof name, "%.190s", prop.name);
    snprintf(c->device_name, sizeof c->device_name, "%.200s (sm_%d%d)", name, prop.major % 100,
             prop.minor % 100);
    c->sm_count = prop.multiProcessorCount;
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    be->cc_major = prop.major;
    be->cc_minor = prop.minor;
    c->expert_recipe = precision_recipe(MOE_PREC_BF16);
    c->fp8_saved_on = 1;
    moe_backend_opts opts = backend_opts_default();
    c->fp8_gemms = opts.fp8_gemms;
    c->fp8_chunk_rows = opts.fp8_chunk_rows;
    c->expert_chunk_rows = opts.expert_chunk_rows;
    c->fp8_fused_save = opts.fp8_fused_save;
    c->attention = opts.attention;
    cuda_wcache_set(be, opts.fp8_weight_cache);
    /* the backend's own stream (backend.h's contract): cuBLAS, cuDNN and our
     * kernels in order on it, ordered against other streams by events only */
    if ((err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (err = cudaMallocHost(&c->stage, CUDA_STAGE_BYTES * CUDA_STAGE_SLOTS)) != cudaSuccess) {
        cu_destroy(be);
        return moe_errf(e, "cuda: cannot make the backend's stream and staging on %s: %s",
                        c->device_name, cudaGetErrorString(err));
    }
    for (int i = 0; i < CUDA_STAGE_SLOTS; i++)
        if ((err = cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming)) !=
            cudaSuccess) {
            cu_destroy(be);
            return moe_errf(e, "cuda: cannot make the staging events on %s: %s",
                            c->device_name, cudaGetErrorString(err));
        }
    cublasStatus_t st = cublasCreate(&c->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cu_destroy(be);
        return moe_errf(e, "cublasCreate: %s", cublasGetStatusString(st));
    }
    if (cudaMalloc(&c->d_bad, sizeof(int)) != cudaSuccess) {
        cu_destroy(be);
        return moe_errf(e, "cuda: cannot allocate a flag on %s", c->device_name);
    }
    cublasSetStream(c->blas, c->stream);
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    be->ctx = c;
    if (cuda_gemm_init(be, e)) {
        cu_destroy(be);
        return -1;
    }
    be->name = "cuda";
    be->kind = MOE_BACKEND_CUDA;
    /* packed rows only through the SIMT attention kernels (not cuDNN's yet) */
    be->segments = MOE_SEGMENTS_SLOW;
    be->act_type = "bf16";
    be->device_memory = 1;
    be->alloc = cu_alloc;
    be->mem_in_use = cu_mem_in_use;
    be->mem_free = cu_mem_free;
    be->peak_tflops = cu_peak_tflops;
    be->free = cu_free;
    be->act_bytes = cu_act_bytes;
    be->upload = cu_upload;
    be->download = cu_download;
    be->memset0 = cu_memset0;
    be->pinned_alloc = cu_pinned_alloc;
    be->pinned_free = cu_pinned_free;
    be->copy = cu_copy;
    be->act_from_real = cu_act_from_real;
    be->act_to_real = cu_act_to_real;
    be->weights_from_master = cu_weights_from_master;
    be->sync = cu_sync;
    be->check = cuda_check;
    be->queue_create = cu_queue_create;
    be->queue_destroy = cu_queue_destroy;
    be->event_create = cu_event_create;
    be->event_destroy = cu_event_destroy;
    be->event_record = cu_event_record;
    be->event_wait = cu_event_wait;
    be->copy_on = cu_copy_on;
    be->spin = cu_spin;
    be->owns = cu_owns;
    be->set_run_opts = cu_set_run_opts;
    be->destroy = cu_destroy;
    cuda_fill_dense_ops(be);
    cuda_fill_attention_ops(be);
    cuda_fill_moe_ops(be);
    cuda_fill_optim_ops(be);
    *out = be;
    return 0;
}

extern "C" const char *cuda_backend_device_name(moe_backend *be) { return CTX(be)->device_name; }

extern "C" void *cuda_backend_stream(moe_backend *be) { return CTX(be)->stream; }
