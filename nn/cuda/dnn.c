/*
 * dnn.c — the cuda backend's matrix products and convolutions, on cuBLAS and cuDNN.
 *
 * Linear layers are one cuBLAS sgemm each way. Our tensors are row-major and cuBLAS is
 * column-major, so each product is written for the transposes: a row-major R×C matrix is a
 * column-major C×R one with the same memory. The gradients are products with beta = 1, which
 * is nn.h's accumulate-into-gradients convention, as on the cpu.
 *
 * A convolution plan holds cuDNN's descriptors for one layer at one input shape and the three
 * algorithms (forward, backward data, backward filter), chosen from cuDNN's heuristics once per
 * convolution key (conv_key.h) and kept in the backend's cache: the same choice every run on
 * the same card and library, and with the backend's deterministic option only algorithms cuDNN
 * calls deterministic. Math is plain FMA
 * fp32 (no TF32), so results stay within fp32 rounding of the cpu's. The workspace is the
 * backend's one, grown to the largest plan's need. Bias gradients are our own fixed-order sum
 * (eltwise.cu) rather than cuDNN's, for the same repeatability.
 *
 * Mixed precision (ENG_BF16): the plans describe bf16 tensors in NHWC, which the tensor cores'
 * kernels want. A NATIVE activation is stored so (cuda.h) and cuDNN reads or writes it in
 * place; a LOGICAL one is converted at the call's edges (amp.cu) through the scratch slots: an
 * input to bf16 NHWC, a result back to fp32 NCHW, written by a forward and added by a backward.
 * The weight is always converted (weights stay fp32), and its gradient, computed in bf16 with
 * beta 0, is added into the fp32 one; a NATIVE dx gets the data gradient, computed with beta
 * 0 into scratch, added in bf16 (the residual add's kernel). That is torch.autocast's arithmetic for a
 * convolution. Linear layers stay fp32 (the heads' few GFLOP).
 *
 * Asymmetric padding (eng_conv_desc's pad_extra, TensorFlow's "same"): cuDNN pads symmetrically
 * only, so such a plan describes x with the extra zero rows and columns appended (H + extra_h by
 * W + extra_w) and keeps the symmetric pad: top/left get pad, bottom/right pad + extra. Each call
 * copies x into that padded shape in a scratch slot (eltwise.cu's cuda_pad_bottom_right), which
 * the forward and the filter gradient read; the data gradient is computed for the padded x (beta
 * 0, into the same slot once the copy is consumed: the stream orders them) and its image part
 * added into dx (cuda_crop_add). In bf16 the padded fp32 copy is what is converted (a NATIVE x
 * widened first; a NATIVE dx of such a plan is refused: only a ResNet trains NATIVE, and its
 * paddings are symmetric). The algorithm
 * cache's key holds pad_extra: the padded shape is another convolution to cuDNN.
 */
#include "cuda.h"

#include "../../lib/log.h"
#include "../../lib/util.h"

#include <stdlib.h>

static const float ONE = 1.0f, ZERO = 0.0f;

/* ---- linear ------------------------------------------------------------------------------------- */

/* Row-major C (m×n) = op(A)·op(B) + beta·C, as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ. */
static void gemm_rm(eng_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                    const float *b, int64_t ldb, const float *beta, float *c, int64_t ldc)
{
    cuda_blas_check(cublasSgemm(cuda_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                (int)n, (int)m, (int)k, &ONE, b, (int)ldb, a, (int)lda, beta, c, (int)ldc),
                    "cublasSgemm");
}

void cuda_linear_forward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *b, tensor_ref *y)
{
    int64_t n = x->shape.dim[0], in = x->shape.dim[1], out = w->shape.dim[0];
    gemm_rm(be, false, true, n, out, in, cuda_ptr(x), in, cuda_ptr(w), in, &ZERO, cuda_ptr(y), out);
    if (b)
        cuda_bias_add(be, cuda_ptr(y), cuda_ptr(b), n, out, 1);
}

void cuda_linear_backward(eng_backend *be, tensor_ref *x, tensor_ref *w, tensor_ref *dy, tensor_ref *dx,
                          tensor_ref *dw, tensor_ref *db)
{
    int64_t n = x->shape.dim[0], in = x->shape.dim[1], out = w->shape.dim[0];
    const float *g = cuda_ptr(dy);
    if (dx) /* dx (n×in) += dy (n×out) · W (out×in) */
        gemm_rm(be, false, false, n, in, out, g, out, cuda_ptr(w), in, &ONE, cuda_ptr(dx), in);
    if (dw) /* dW (out×in) += dyᵀ (out×n) · x (n×in) */
        gemm_rm(be, true, false, out, in, n, g, out, cuda_ptr(x), in, &ONE, cuda_ptr(dw), in);
    if (db)
        cuda_bias_grad(be, g, n, out, 1, cuda_ptr(db));
}

/* ---- convolution plans ---------------------------------------------------------------------------- */

struct eng_plan {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    conv_algos a;
    eng_shape xshape, wshape, yshape; /* as cuDNN sees them: x with the extra zeros appended */
    int64_t extra[2];                 /* pad_extra: rows, columns appended to x (0, 0: none) */
    bool bias;
    bool bf16; /* mixed precision: cuDNN sees bf16 NHWC copies (conv_forward_bf16) */
};

/* How cuDNN sees a plan's tensors: ours as they are (fp32 NCHW), or bf16 NHWC copies. */
typedef struct {
    cudnnTensorFormat_t format;
    cudnnDataType_t type;
} conv_storage;

static conv_storage storage_of(const eng_plan *p)
{
    return p->bf16 ? (conv_storage){CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16}
                   : (conv_storage){CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT};
}

static void tensor_desc(cudnnTensorDescriptor_t *d, const eng_shape *s, conv_storage st)
{
    cuda_dnn_check(cudnnCreateTensorDescriptor(d), "cudnnCreateTensorDescriptor");
    cuda_dnn_check(cudnnSetTensor4dDescriptor(*d, st.format, st.type, (int)s->dim[0], (int)s->dim[1], (int)s->dim[2],
                                              (int)s->dim[3]),
                   "cudnnSetTensor4dDescriptor");
}

static void describe(eng_plan *p, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w)
{
    int64_t groups = d->groups ? d->groups : 1;
    conv_storage st = storage_of(p);
    tensor_desc(&p->x, x, st);
    tensor_desc(&p->y, &p->yshape, st);
    cuda_dnn_check(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
    cuda_dnn_check(cudnnSetFilter4dDescriptor(p->w, st.type, st.format, (int)w->dim[0], (int)w->dim[1], (int)w->dim[2],
                                              (int)w->dim[3]),
                   "cudnnSetFilter4dDescriptor");
    cuda_dnn_check(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
#define ONE_IF_ZERO(v) ((int)((v) ? (v) : 1))
    cuda_dnn_check(cudnnSetConvolution2dDescriptor(p->conv, (int)d->pad[0], (int)d->pad[1], ONE_IF_ZERO(d->stride[0]),
                                                   ONE_IF_ZERO(d->stride[1]), ONE_IF_ZERO(d->dilation[0]),
                                                   ONE_IF_ZERO(d->dilation[1]), CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT),
                   "cudnnSetConvolution2dDescriptor");
#undef ONE_IF_ZERO
    cuda_dnn_check(cudnnSetConvolutionGroupCount(p->conv, (int)groups), "cudnnSetConvolutionGroupCount");
    /* fp32 stays fp32 (no TF32); bf16 is what the tensor cores are for */
    cuda_dnn_check(cudnnSetConvolutionMathType(p->conv, p->bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
                   "cudnnSetConvolutionMathType");
}

/* Of cuDNN's ranked candidates, the first that works here (in fp32, with plain fp32 math; in
 * bf16, with any) and, when asked, is deterministic goes to out_algo and its workspace to
 * out_bytes. A macro because the three kinds of result are three struct types with the same
 * fields. */
#define PICK(results, count, deterministic, fp32, out_algo, out_bytes)                                                 \
    do {                                                                                                               \
        for (int i_ = 0; i_ < (count); i_++) {                                                                         \
            bool tensor_ops_ = (results)[i_].mathType == CUDNN_TENSOR_OP_MATH ||                                       \
                               (results)[i_].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;                        \
            if ((results)[i_].status != CUDNN_STATUS_SUCCESS || ((fp32) && tensor_ops_) ||                             \
                ((deterministic) && (results)[i_].determinism != CUDNN_DETERMINISTIC))                                 \
                continue;                                                                                              \
            *(out_algo) = (results)[i_].algo;                                                                          \
            *(out_bytes) = (results)[i_].memory;                                                                       \
            break;                                                                                                     \
        }                                                                                                              \
    } while (0)

enum { CANDIDATES = 16 };

/* cuDNN's heuristic choice of the three algorithms for plan p's descriptors. */
static conv_algos ask_cudnn(eng_backend *be, const eng_plan *p, const conv_key *key)
{
    cudnnHandle_t h = cuda_of(be)->dnn;
    bool det = key->deterministic, fp32 = key->precision == ENG_FP32;
    conv_algos a = {.key = *key};
    int n;
    size_t bytes[3] = {(size_t)-1, (size_t)-1, (size_t)-1};
    cudnnConvolutionFwdAlgoPerf_t f[CANDIDATES];
    cuda_dnn_check(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, CANDIDATES, &n, f),
                   "forward algorithm");
    PICK(f, n, det, fp32, &a.fwd, &bytes[0]);
    cudnnConvolutionBwdDataAlgoPerf_t bd[CANDIDATES];
    cuda_dnn_check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x, CANDIDATES, &n, bd),
                   "backward-data algorithm");
    PICK(bd, n, det, fp32, &a.bwd_data, &bytes[1]);
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CANDIDATES];
    cuda_dnn_check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w, CANDIDATES, &n, bf),
                   "backward-filter algorithm");
    PICK(bf, n, det, fp32, &a.bwd_filter, &bytes[2]);
    for (int k = 0; k < 3; k++)
        if (bytes[k] == (size_t)-1)
            die(EXIT_RUNTIME, "cuda: cuDNN offers no %s%s algorithm for a convolution of this shape",
                det ? "deterministic " : "", fp32 ? "fp32" : "bf16");
    a.workspace = bytes[0] > bytes[1] ? bytes[0] : bytes[1];
    a.workspace = a.workspace > bytes[2] ? a.workspace : bytes[2];
    return a;
}

/* The algorithms for this key: from the backend's cache, or asked for once and kept. */
static conv_algos choose_algorithms(eng_backend *be, const eng_plan *p, const conv_key *key)
{
    cuda_impl *c = cuda_of(be);
    for (int i = 0; i < c->nalgos; i++)
        if (conv_key_equal(&c->algos[i].key, key))
            return c->algos[i];
    if (c->nalgos == c->algos_cap) {
        c->algos_cap = c->algos_cap ? 2 * c->algos_cap : 32;
        c->algos = xrealloc(c->algos, (size_t)c->algos_cap * sizeof *c->algos);
    }
    return c->algos[c->nalgos++] = ask_cudnn(be, p, key);
}

/* The backend's workspace, grown (once per new largest plan) to this plan's need. */
static void reserve_workspace(eng_backend *be, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (bytes <= c->workspace_bytes)
        return;
    eng_free(be, c->workspace); /* waits for the stream */
    c->workspace = eng_alloc(be, bytes);
    c->workspace_bytes = bytes;
}

eng_plan *cuda_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w, bool bias)
{
    cuda_impl *c = cuda_of(be);
    eng_plan *p = xcalloc(1, sizeof *p);
    p->extra[0] = d->pad_extra[0], p->extra[1] = d->pad_extra[1];
    p->xshape = eng_shape4(x->dim[0], x->dim[1], x->dim[2] + p->extra[0], x->dim[3] + p->extra[1]);
    p->wshape = *w;
    p->yshape = eng_conv_output_shape(x, w, d);
    p->bias = bias;
    p->bf16 = c->precision == ENG_BF16;
    describe(p, d, &p->xshape, w);
    conv_key key = conv_key_of(d, x, w, c->deterministic, c->precision);
    p->a = choose_algorithms(be, p, &key);
    reserve_workspace(be, p->a.workspace);
    return p;
}

void cuda_plan_free(eng_backend *be, eng_plan *p)
{
    (void)be;
    if (!p)
        return;
    cudnnDestroyTensorDescriptor(p->x);
    cudnnDestroyTensorDescriptor(p->y);
    cudnnDestroyFilterDescriptor(p->w);
    cudnnDestroyConvolutionDescriptor(p->conv);
    free(p);
}

/* ---- asymmetric padding: x with its extra zeros, in a scratch slot ---------------------------------- */

/* The scratch slots a convolution's copies take: for bf16, the input (or the output's gradient),
 * the weight (or its gradient), and the third activation-sized one; for an asymmetric padding,
 * x with its extra zeros (or the gradient of that padded x), in fp32, and a NATIVE x widened
 * to fp32 NCHW before it is padded. */
enum { SLOT_FIRST = 0, SLOT_WEIGHT = 1, SLOT_SECOND = 2, SLOT_PADDED = 3, SLOT_WIDE = 4 };

static bool padded(const eng_plan *p) { return p->extra[0] || p->extra[1]; }

/* The padded x's slot (its copy, or its gradient). */
static float *padded_slot(eng_backend *be, const eng_plan *p)
{
    return cuda_scratch(be, SLOT_PADDED, (size_t)eng_numel(&p->xshape) * sizeof(float));
}

/* x as an fp32 plan reads it, or as a bf16 plan converts it: the caller's tensor, or a copy
 * with the extra zero rows and columns. */
static const float *x_as_read(eng_backend *be, const eng_plan *p, tensor_ref *x)
{
    if (!padded(p))
        return cuda_ptr(x);
    float *xp = padded_slot(be, p);
    const int64_t *s = x->shape.dim;
    cuda_pad_bottom_right(be, cuda_as_logical(be, x, SLOT_WIDE), xp, s[0] * s[1], s[2], s[3], p->extra[0],
                          p->extra[1]);
    return xp;
}

/* dx += the image part of dxp, the gradient of the padded x (the extra zeros' part is dropped). */
static void crop_into(eng_backend *be, const eng_plan *p, const float *dxp, tensor_ref *dx)
{
    const int64_t *s = dx->shape.dim;
    cuda_crop_add(be, dxp, cuda_ptr(dx), s[0] * s[1], s[2], s[3], p->extra[0], p->extra[1]);
}

/* ---- the bf16 path: NATIVE tensors in place, copies of the others in the scratch slots --------------- */

static size_t bf16_bytes(const eng_shape *s) { return (size_t)eng_numel(s) * 2; }

/* t (N×C×H×W, or a weight O×I×KH×KW) as a bf16 NHWC copy in scratch slot `slot`. */
static void *nhwc_bf16_copy(eng_backend *be, int slot, const eng_shape *s, const float *t)
{
    void *copy = cuda_scratch(be, slot, bf16_bytes(s));
    cuda_to_nhwc_bf16(be, t, copy, s->dim[0], s->dim[1], s->dim[2] * s->dim[3]);
    return copy;
}

/* dst (fp32, logical) = or += a bf16 NHWC result of shape s. */
static void from_bf16(eng_backend *be, const void *src, const eng_shape *s, float *dst, bool accumulate)
{
    cuda_from_nhwc_bf16(be, src, dst, s->dim[0], s->dim[1], s->dim[2] * s->dim[3], accumulate);
}

/* x as cuDNN reads it: a NATIVE x of an unpadded plan in place, else a copy in `slot`. */
static const void *x_bf16(eng_backend *be, const eng_plan *p, int slot, tensor_ref *x)
{
    if (cuda_native_bf16(be, x) && !padded(p))
        return cuda_ptr(x);
    return nhwc_bf16_copy(be, slot, &p->xshape, x_as_read(be, p, x));
}

/* An activation-shaped operand t of shape s (y or dy): in place when NATIVE, else a copy in `slot`. */
static const void *act_bf16(eng_backend *be, int slot, const eng_shape *s, tensor_ref *t)
{
    return cuda_native_bf16(be, t) ? (const void *)cuda_ptr(t) : nhwc_bf16_copy(be, slot, s, cuda_ptr(t));
}

static void conv_forward_bf16(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *w, tensor_ref *y)
{
    cuda_impl *c = cuda_of(be);
    bool direct = cuda_native_bf16(be, y);
    const void *xb = x_bf16(be, p, SLOT_FIRST, x), *wb = nhwc_bf16_copy(be, SLOT_WEIGHT, &p->wshape, cuda_ptr(w));
    void *yb = direct ? (void *)cuda_ptr(y) : cuda_scratch(be, SLOT_SECOND, bf16_bytes(&p->yshape));
    cuda_dnn_check(cudnnConvolutionForward(c->dnn, &ONE, p->x, xb, p->w, wb, p->conv, p->a.fwd, c->workspace,
                                           c->workspace_bytes, &ZERO, p->y, yb),
                   "cudnnConvolutionForward (bf16)");
    if (!direct)
        from_bf16(be, yb, &p->yshape, cuda_ptr(y), false);
}

/* dx += a bf16 NHWC gradient of x as cuDNN saw it: added in bf16 into a NATIVE dx, widened
 * straight into a LOGICAL one, or into the padded slot and then cropped in. */
static void dx_from_bf16(eng_backend *be, const eng_plan *p, const void *dxb, tensor_ref *dx)
{
    if (cuda_native_bf16(be, dx)) {
        if (padded(p))
            invariant_failed("cuda: a native gradient for a convolution with asymmetric padding");
        eng_tensor grad = {.shape = dx->shape, .base = (void *)dxb, .layout = ENG_LAYOUT_NATIVE};
        cuda_add_forward(be, dx, &grad, false, dx);
        return;
    }
    if (!padded(p)) {
        from_bf16(be, dxb, &p->xshape, cuda_ptr(dx), true);
        return;
    }
    float *dxp = padded_slot(be, p);
    from_bf16(be, dxb, &p->xshape, dxp, false);
    crop_into(be, p, dxp, dx);
}

static void conv_backward_bf16(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                               tensor_ref *dx, tensor_ref *dw)
{
    cuda_impl *c = cuda_of(be);
    const void *dyb = act_bf16(be, SLOT_FIRST, &p->yshape, dy);
    if (dx) {
        void *wb = nhwc_bf16_copy(be, SLOT_WEIGHT, &p->wshape, cuda_ptr(w)),
             *dxb = cuda_scratch(be, SLOT_SECOND, bf16_bytes(&p->xshape));
        cuda_dnn_check(cudnnConvolutionBackwardData(c->dnn, &ONE, p->w, wb, p->y, dyb, p->conv, p->a.bwd_data,
                                                    c->workspace, c->workspace_bytes, &ZERO, p->x, dxb),
                       "cudnnConvolutionBackwardData (bf16)");
        dx_from_bf16(be, p, dxb, dx);
    }
    if (dw) {
        const void *xb = x_bf16(be, p, SLOT_SECOND, x);
        void *dwb = cuda_scratch(be, SLOT_WEIGHT, bf16_bytes(&p->wshape));
        cuda_dnn_check(cudnnConvolutionBackwardFilter(c->dnn, &ONE, p->x, xb, p->y, dyb, p->conv, p->a.bwd_filter,
                                                      c->workspace, c->workspace_bytes, &ZERO, p->w, dwb),
                       "cudnnConvolutionBackwardFilter (bf16)");
        from_bf16(be, dwb, &p->wshape, cuda_ptr(dw), true);
    }
}

/* ---- convolution ------------------------------------------------------------------------------------ */

static void expect_bias(const eng_plan *p, bool has)
{
    if (p->bias != has)
        invariant_failed("conv: the plan was made %s a bias", p->bias ? "with" : "without");
}

void cuda_conv_forward(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *w, tensor_ref *b,
                       tensor_ref *y)
{
    cuda_impl *c = cuda_of(be);
    expect_bias(p, b != NULL);
    if (b && cuda_native_bf16(be, y))
        invariant_failed("cuda: a convolution with a bias into a native bf16 output");
    if (p->bf16)
        conv_forward_bf16(be, p, x, w, y);
    else
        cuda_dnn_check(cudnnConvolutionForward(c->dnn, &ONE, p->x, x_as_read(be, p, x), p->w, cuda_ptr(w), p->conv,
                                               p->a.fwd, c->workspace, c->workspace_bytes, &ZERO, p->y,
                                               cuda_ptr(y)),
                       "cudnnConvolutionForward");
    if (b)
        cuda_bias_add(be, cuda_ptr(y), cuda_ptr(b), p->yshape.dim[0], p->yshape.dim[1],
                      p->yshape.dim[2] * p->yshape.dim[3]);
}

/* dx += ∂: beta = 1 straight into dx, or beta = 0 into the padded x's gradient, then cropped in. */
static void backward_data_fp32(eng_backend *be, eng_plan *p, tensor_ref *w, tensor_ref *dy, tensor_ref *dx)
{
    cuda_impl *c = cuda_of(be);
    float *out = padded(p) ? padded_slot(be, p) : cuda_ptr(dx);
    cuda_dnn_check(cudnnConvolutionBackwardData(c->dnn, &ONE, p->w, cuda_ptr(w), p->y, cuda_ptr(dy), p->conv,
                                                p->a.bwd_data, c->workspace, c->workspace_bytes,
                                                padded(p) ? &ZERO : &ONE, p->x, out),
                   "cudnnConvolutionBackwardData");
    if (padded(p))
        crop_into(be, p, out, dx);
}

/* dw += ∂ (beta = 1), from x as the forward read it. */
static void backward_filter_fp32(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *dy, tensor_ref *dw)
{
    cuda_impl *c = cuda_of(be);
    cuda_dnn_check(cudnnConvolutionBackwardFilter(c->dnn, &ONE, p->x, x_as_read(be, p, x), p->y, cuda_ptr(dy),
                                                  p->conv, p->a.bwd_filter, c->workspace, c->workspace_bytes, &ONE,
                                                  p->w, cuda_ptr(dw)),
                   "cudnnConvolutionBackwardFilter");
}

void cuda_conv_backward(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *w, tensor_ref *dy,
                        tensor_ref *dx, tensor_ref *dw, tensor_ref *db)
{
    if (db)
        expect_bias(p, true);
    if (db && cuda_native_bf16(be, dy))
        invariant_failed("cuda: a bias gradient from a native bf16 output gradient");
    if (p->bf16)
        conv_backward_bf16(be, p, x, w, dy, dx, dw);
    if (dx && !p->bf16)
        backward_data_fp32(be, p, w, dy, dx);
    if (dw && !p->bf16)
        backward_filter_fp32(be, p, x, dy, dw);
    if (db)
        cuda_bias_grad(be, cuda_ptr(dy), p->yshape.dim[0], p->yshape.dim[1], p->yshape.dim[2] * p->yshape.dim[3],
                       cuda_ptr(db));
}

void cuda_conv_bn_forward_eval(eng_backend *be, eng_plan *p, tensor_ref *x, tensor_ref *w, double eps,
                               tensor_ref *gamma, tensor_ref *beta, tensor_ref *mean, tensor_ref *var,
                               tensor_ref *residual, eng_eval_act act, tensor_ref *y)
{
    cuda_conv_forward(be, p, x, w, NULL, y);
    cuda_bn_eval_epilogue(be, eps, gamma, beta, mean, var, residual, act, y);
}
