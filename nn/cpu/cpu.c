/*
 * cpu.c — the `cpu` backend: memory, threads, and the table of operations (backend.h).
 *
 * Tensors are fp32 in PyTorch's logical layout (C-contiguous NCHW / N×F), so upload and
 * download are copies; a NATIVE tensor may instead be channel-blocked (cpu_blocking), and then
 * upload, download and copy convert between the two orders. Matrix products go to oneDNN's sgemm; the elementwise layers are
 * plain loops the compiler vectorises. oneDNN runs on OpenMP here (Debian's build), so the
 * thread count is OpenMP's; results are deterministic for a fixed count.
 */
#include "cpu.h"
#include "test_hooks.h"

#include "log.h"
#include "util.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

float *cpu_ptr(const eng_tensor *t) { return (float *)((char *)t->base + t->offset); }

cpu_ncs cpu_ncs_of(const eng_tensor *x)
{
    cpu_ncs d = {x->shape.dim[0], x->shape.dim[1], 1};
    if (x->shape.ndim == 4)
        d.s = x->shape.dim[2] * x->shape.dim[3];
    return d;
}

double cpu_at_or(const eng_tensor *t, int64_t c, double fallback) { return t ? cpu_ptr(t)[c] : fallback; }

/* ---- native layout: nChwBc --------------------------------------------------------------------- */

/* A property of the machine, read once: the block of oneDNN's direct convolution kernels. */
static int machine_block;
static int forced_block;
static pthread_once_t block_once = PTHREAD_ONCE_INIT;

static void read_machine_block(void)
{
    machine_block = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core ? 16 : 8;
}

void cpu_force_block(int b) { forced_block = b; }

int cpu_blocking(const eng_tensor *t)
{
    if (t->layout != ENG_LAYOUT_NATIVE || t->shape.ndim != 4)
        return 0;
    pthread_once(&block_once, read_machine_block);
    int b = forced_block ? forced_block : machine_block;
    return t->shape.dim[1] % b == 0 ? b : 0;
}

/* One 4-D tensor's element (n, c, s) (s = h·W + w) at logical[(n·C + c)·S + s] and at
 * blocked[((n·C/B + c/B)·S + s)·B + c%B]; each (n, channel block) is one thread's. */
void cpu_reorder_blocked(const float *from, float *to, const eng_shape *sh, int b, bool to_blocked, bool add)
{
    int64_t blocks = sh->dim[0] * (sh->dim[1] / b), hw = sh->dim[2] * sh->dim[3];
    /* (s, l) sits at s·b + l blocked and at l·hw + s logical: pick each side's strides once */
    int64_t blocked_s = b, blocked_l = 1, logical_s = 1, logical_l = hw;
    int64_t from_s = to_blocked ? logical_s : blocked_s, from_l = to_blocked ? logical_l : blocked_l;
    int64_t to_s = to_blocked ? blocked_s : logical_s, to_l = to_blocked ? blocked_l : logical_l;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < blocks; k++) {
        const float *src = from + k * hw * b;
        float *dst = to + k * hw * b;
        for (int64_t s = 0; s < hw; s++)
            for (int l = 0; l < b; l++) {
                float v = src[s * from_s + l * from_l], *d = &dst[s * to_s + l * to_l];
                *d = add ? *d + v : v;
            }
    }
}

/* Copies a tensor of shape sh from src to dst, converting between their orders where they differ. */
static void transfer(const float *src, int src_block, float *dst, int dst_block, const eng_shape *sh)
{
    if (eng_numel(sh) == 0) /* an empty tensor may have no memory at all */
        return;
    if (src_block == dst_block)
        memmove(dst, src, (size_t)eng_numel(sh) * sizeof(float));
    else if (src_block == 0)
        cpu_reorder_blocked(src, dst, sh, dst_block, true, false);
    else if (dst_block == 0)
        cpu_reorder_blocked(src, dst, sh, src_block, false, false);
    else
        invariant_failed("cpu: a copy between two channel blockings (%d and %d)", src_block, dst_block);
}

static int cpu_open(eng_backend *be, const eng_backend_options *opt, char **err)
{
    if (opt->precision != ENG_FP32) {
        report_failure(err, "cpu: mixed precision (bf16) runs on the GPU only; the cpu computes in fp32");
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = opt->threads > 0 ? opt->threads : (int)(cores > 0 ? cores : 1);
    omp_set_num_threads(threads);
    be->opt.threads = threads;
    return 0;
}

static void cpu_close(eng_backend *be) { (void)be; }

static void cpu_sync(eng_backend *be) { (void)be; } /* every operation has run when it returns */

/* The memory is the host's: the trainer reads the process's peak resident size instead. */
static size_t cpu_memory_peak(eng_backend *be)
{
    (void)be;
    return 0;
}

static size_t cpu_bytes(eng_backend *be, const eng_shape *s)
{
    (void)be;
    return (size_t)eng_numel(s) * sizeof(float);
}

static void *cpu_alloc(eng_backend *be, size_t bytes)
{
    (void)be;
    return xmalloc_large(bytes);
}

static void cpu_free(eng_backend *be, void *base)
{
    (void)be;
    free(base);
}

static void cpu_zero(eng_backend *be, const eng_tensor *t)
{
    memset(cpu_ptr(t), 0, cpu_bytes(be, &t->shape));
}

/* Element counts agree (nn.c); a blocked side has the other's shape or it would not convert. */
static void cpu_copy(eng_backend *be, const eng_tensor *src, const eng_tensor *dst)
{
    (void)be;
    int sb = cpu_blocking(src), db = cpu_blocking(dst);
    if (sb != db && !eng_shape_equal(&src->shape, &dst->shape))
        invariant_failed("cpu: a copy that changes layout must keep the shape");
    transfer(cpu_ptr(src), sb, cpu_ptr(dst), db, &dst->shape);
}

static void cpu_upload(eng_backend *be, const eng_tensor *dst, const float *src)
{
    (void)be;
    transfer(src, 0, cpu_ptr(dst), cpu_blocking(dst), &dst->shape);
}

static void cpu_download(eng_backend *be, const eng_tensor *src, float *dst)
{
    (void)be;
    transfer(cpu_ptr(src), cpu_blocking(src), dst, 0, &src->shape);
}

/* One thread per (image, channel) plane: each output element is a table lookup. */
static void cpu_upload_images(eng_backend *be, const eng_tensor *x, const uint8_t *src, int src_c, const int *map,
                              const float *lut)
{
    (void)be;
    int64_t n = x->shape.dim[0], c = x->shape.dim[1], hw = x->shape.dim[2] * x->shape.dim[3];
    float *out = cpu_ptr(x);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < n * c; p++) {
        const uint8_t *in = src + (p / c) * hw * src_c + map[p % c];
        const float *t = lut + (p % c) * 256;
        for (int64_t i = 0; i < hw; i++)
            out[p * hw + i] = t[in[i * src_c]];
    }
}

const eng_ops eng_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .bytes = cpu_bytes,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .upload = cpu_upload,
    .copy = cpu_copy,
    .download = cpu_download,
    .sync = cpu_sync,
    .memory_peak = cpu_memory_peak,
    .upload_images = cpu_upload_images,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .sigmoid_forward = cpu_sigmoid_forward,
    .sigmoid_backward = cpu_sigmoid_backward,
    .silu_forward = cpu_silu_forward,
    .silu_backward = cpu_silu_backward,
    .channel_scale_forward = cpu_channel_scale_forward,
    .channel_scale_backward = cpu_channel_scale_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .add_forward = cpu_add_forward,
    .add_backward = cpu_add_backward,
    .l2norm_forward = cpu_l2norm_forward,
    .l2norm_backward = cpu_l2norm_backward,
    .bank_scores_forward = cpu_bank_scores_forward,
    .bank_scores_backward = cpu_bank_scores_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .sgd_step_many = cpu_sgd_step_many,
    .adam_step_many = cpu_adam_step_many,
    .ema = cpu_ema,
    .scale = cpu_scale,
    .argmax_rows = cpu_argmax_rows,
    .sum_squares = cpu_sum_squares,
    .sum_squares_many = cpu_sum_squares_many,
    .info_nce = cpu_info_nce,
    .cross_entropy = cpu_cross_entropy,
    .bce_logits = cpu_bce_logits,
    .sinkhorn = cpu_sinkhorn,
    .soft_cross_entropy = cpu_soft_cross_entropy,
    /* convolution and batch norm (conv.c, batchnorm.c) */
    .plan_free = cpu_plan_free,
    .conv_plan = cpu_conv_plan,
    .conv_forward = cpu_conv_forward,
    .conv_backward = cpu_conv_backward,
    .conv_bn_forward_eval = cpu_conv_bn_forward_eval,
    .batchnorm_forward_train = cpu_batchnorm_forward_train,
    .batchnorm_forward_eval = cpu_batchnorm_forward_eval,
    .batchnorm_backward = cpu_batchnorm_backward,
    .batchnorm_backward_eval = cpu_batchnorm_backward_eval,
    /* layer norm (layernorm.c) */
    .layernorm2d_forward = cpu_layernorm2d_forward,
    .layernorm2d_backward = cpu_layernorm2d_backward,
    /* local response normalisation (lrn.c) */
    .lrn_forward = cpu_lrn_forward,
    .lrn_backward = cpu_lrn_backward,
    /* pooling (pool.c) */
    .maxpool_forward = cpu_maxpool_forward,
    .maxpool_backward = cpu_maxpool_backward,
    .avgpool_forward = cpu_avgpool_forward,
    .avgpool_backward = cpu_avgpool_backward,
    .adaptive_avgpool_forward = cpu_adaptive_avgpool_forward,
    .adaptive_avgpool_backward = cpu_adaptive_avgpool_backward,
    .adaptive_maxpool_forward = cpu_adaptive_maxpool_forward,
    .adaptive_maxpool_backward = cpu_adaptive_maxpool_backward,
};
