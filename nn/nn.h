/*
 * nn.h — the model engine's contract between model code and a backend.
 *
 * Model code (trunks, heads, the train step) describes tensors by their logical shape and
 * asks a backend to run layers on them; it never reads or writes a tensor's memory and never
 * assumes a layout. A backend (`cpu` today on oneDNN, `cuda` later on cuDNN/cuBLAS) owns the
 * memory, keeps it in whatever layout and precision is fastest for it, and converts only at
 * the edges: eng_upload / eng_download move fp32 data in the logical (PyTorch) layout between
 * the host and the device.
 *
 * The layers follow llm.c: one forward and one explicit backward per layer, no autograd.
 * Conventions every backward function keeps:
 *   - gradients ACCUMULATE (+=): the caller zeroes gradient memory once per step. That is what
 *     makes residual connections, weights shared across multi-crop passes and heads that read
 *     the same features correct without special cases;
 *   - a NULL input-gradient tensor means "not needed" (the first layer, a frozen trunk), and
 *     the backend then skips that work;
 *   - forward functions overwrite their output.
 *
 * Shapes are logical and PyTorch-ordered: activations N×C×H×W or N×F, linear weights O×I,
 * convolution weights O×(I/groups)×KH×KW. A tensor is a view into a backend allocation (a
 * base pointer and a byte offset), so all parameters can live in one buffer and all their
 * gradients in another, as docs/ARCHITECTURE.md explains (one all-reduce, one optimizer pass, one write).
 *
 * Names start with eng_ (the model engine), not nn_: libnanomsg, which Criterion links,
 * exports hundreds of nn_* symbols (nn_free among them).
 */
#ifndef SELFSUP_NN_H
#define SELFSUP_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NN_MAX_DIMS 4

typedef struct {
    int ndim;
    int64_t dim[NN_MAX_DIMS];
} eng_shape;

typedef struct eng_backend eng_backend;

/* How a tensor's elements sit in memory. LOGICAL is PyTorch's C-contiguous order, what every
 * layer accepts. NATIVE lets the backend keep it in whatever order its kernels like best for
 * that shape (oneDNN's channel-blocked nChw16c on the cpu; it may be the logical order), so a
 * chain of layers runs without converting between them. Model code chooses NATIVE only for
 * activations that go from one of the layers documented as accepting it to another:
 *   - evaluation: eng_conv_bn_forward_eval (x, residual, y), eng_channel_scale_forward (x and y
 *     alike), eng_adaptive_avgpool_forward (x, and y if x is);
 *   - training (a ResNet's): eng_conv_forward and eng_conv_backward (each of x, y, dy, dx in
 *     either; the weights and bias logical), and, each with all its activations in one layout,
 *     eng_batchnorm[_relu]_forward_train, eng_batchnorm[_relu]_backward, eng_relu_*, eng_add_*,
 *     eng_add_relu_*, eng_maxpool_forward and eng_maxpool_backward; eng_adaptive_avgpool_backward
 *     (dx in either, dy logical).
 * eng_zero, eng_upload, eng_download and eng_copy take either and convert; every other layer
 * refuses a NATIVE tensor (a programming error). */
typedef enum { ENG_LAYOUT_LOGICAL = 0, ENG_LAYOUT_NATIVE = 1 } eng_layout;

/* A view of backend memory: opaque to model code. */
typedef struct {
    eng_shape shape;
    void *base;        /* a backend allocation (eng_alloc) */
    size_t offset;     /* bytes from base, as the backend laid the view out */
    eng_layout layout; /* zero (LOGICAL) unless model code set NATIVE */
} eng_tensor;

/* ---- backends ------------------------------------------------------------------------------- */

/* What a backend computes in. ENG_BF16 is VISSL's MODEL.AMP_PARAMS.USE_AMP on the cuda backend:
 * convolutions run in bf16 on the tensor cores with fp32 accumulation (their inputs rounded to
 * bf16 on the way in, their results to bf16 on the way out, as torch.autocast's), and a NATIVE
 * tensor is stored in bf16 (NHWC), so the activations and activation gradients a model keeps
 * native between those layers (a ResNet trunk's in training) are bf16 values: each layer reads
 * them widened and rounds its result once. LOGICAL tensors, parameters, their gradients, the
 * norms' statistics, losses and the optimizer stay fp32. The cpu backend computes in fp32 only
 * and refuses ENG_BF16 at open. */
typedef enum { ENG_FP32 = 0, ENG_BF16 = 1 } eng_precision;

typedef struct {
    int threads;        /* 0 = every core */
    uint64_t seed;      /* for dropout masks (counter-based, see rng.h) */
    int device;         /* cuda: the GPU, the process's local rank (0 on one GPU) */
    bool deterministic; /* cuda: only algorithms whose results do not vary run to run */
    eng_precision precision; /* ENG_FP32, or cuda's mixed precision ENG_BF16 */
    bool winograd;      /* cpu: training convolutions take Winograd's kernels where faster */
} eng_backend_options;

/* Open a backend by name ("cpu", "cuda"). NULL with *err when it is unknown or unavailable
 * (a build without CUDA, a machine without the GPU asked for). */
eng_backend *eng_backend_open(const char *name, const eng_backend_options *opt, char **err);
void eng_backend_close(eng_backend *be);
const char *eng_backend_name(const eng_backend *be);
/* Block until every operation queued on the backend has run. A GPU backend runs them
 * asynchronously (the host only waits where a value comes back), so a timer around part of a
 * step must sync first to time the work rather than its queueing; the cpu runs them in place. */
void eng_sync(eng_backend *be);
/* t's address in the device's memory, once the work queued on it has run (eng_sync), for a
 * library that moves device memory itself (NCCL: nn/cuda/coll_nccl.h); NULL on a backend whose
 * tensors are host memory (cpu). */
void *eng_device_address(eng_backend *be, const eng_tensor *t);
/* For a library that queues its own work after the backend's (NCCL's bucketed all-reduce):
 * the queue the backend's work runs on (a cudaStream_t), and t's device address without
 * waiting for that work. NULL on a backend whose tensors are host memory (cpu). */
void *eng_device_queue(eng_backend *be);
void *eng_device_address_queued(eng_backend *be, const eng_tensor *t);
/* Host memory that inputs are read from in place (a shm ring's data area, where the collate
 * stage writes its batches: stage_input_memory) made page-locked for the device, so that
 * eng_upload_images copies from it by DMA, without staging, on a copy queue of its own while
 * the previous step still computes. A backend whose tensors are host memory (cpu) has nothing
 * to do: true. false with *why when the device refuses (uploads then still work, staged).
 * eng_unpin_host undoes it; it must come before the memory is unmapped. */
bool eng_pin_host(eng_backend *be, void *p, size_t bytes, char **why);
void eng_unpin_host(eng_backend *be, void *p);
/* The most device memory the backend has held at once, in bytes: its allocations, scratch and
 * workspace (torch.cuda.max_memory_allocated's figure, for the log lines). 0 on a backend whose
 * memory is the host's (cpu), where the process's peak resident size says it. */
size_t eng_memory_peak(eng_backend *be);

/* ---- several ranks ------------------------------------------------------------------------------- */

/* Sums and maxima over the ranks of a data-parallel world (or a group of them), for an op that
 * computes over every rank's rows (SwAV's Sinkhorn, SyncBN): reduce makes v[0..n) (host
 * doubles) the sum, or with `max` the maximum, over the `world` ranks, the same bits on every
 * rank; 0, or -1 when the collective failed. The reducer keeps the error for its owner; each op
 * says what it does then (Sinkhorn returns -1, batch norm goes on with the rank's own values). */
typedef struct {
    int (*reduce)(void *ctx, double *v, size_t n, bool max);
    void *ctx;
    int world;
} eng_reducer;

/* ---- memory ---------------------------------------------------------------------------------- */

int64_t eng_numel(const eng_shape *s);
eng_shape eng_shape2(int64_t n, int64_t f);
eng_shape eng_shape3(int64_t a, int64_t b, int64_t c);
eng_shape eng_shape4(int64_t n, int64_t c, int64_t h, int64_t w);
bool eng_shape_equal(const eng_shape *a, const eng_shape *b);

/* Bytes the backend needs for a tensor of this shape in either layout (and its precision). */
size_t eng_bytes(eng_backend *be, const eng_shape *s);
/* An allocation of `bytes`, aligned for the backend; freed with eng_free. */
void *eng_alloc(eng_backend *be, size_t bytes);
void eng_free(eng_backend *be, void *base);
/* A tensor that owns a fresh allocation (free it with eng_tensor_free). */
eng_tensor eng_tensor_new(eng_backend *be, eng_shape shape);
void eng_tensor_free(eng_backend *be, eng_tensor *t);
/* The same memory seen with another shape of the same element count (flatten); LOGICAL only. */
eng_tensor eng_reshape(const eng_tensor *t, eng_shape shape);
/* Rows [first, first + count) of t (along its first dimension), a view into t's memory. */
eng_tensor eng_rows(eng_backend *be, const eng_tensor *t, int64_t first, int64_t count);

void eng_zero(eng_backend *be, const eng_tensor *t);
/* Host fp32 in logical (PyTorch, C-contiguous) order to and from the device. */
void eng_upload(eng_backend *be, const eng_tensor *dst, const float *src);
void eng_download(eng_backend *be, const eng_tensor *src, float *dst);
/* dst = src, device to device (same element count; e.g. a feature into a batch slice). */
void eng_copy(eng_backend *be, const eng_tensor *src, const eng_tensor *dst);

/* A batch of uint8 images into x (N × C × H × W, C ≤ 3), as torchvision's ToTensor then
 * Normalize: src is N × H × W × src_c bytes (channels last, as the collate stage writes them);
 * channel c of x is source channel map[c], each value (float(px) / norm[k] − norm[3 + k]) /
 * norm[6 + k] with k = map[c], rounded to float32 after every step. norm is a batch record's
 * `normalize` rows (divisor, mean, std); map takes channels in another order (BGR) or fewer
 * of them (LAB's L). The bytes travel, a quarter of the floats, and the device normalises.
 * src may be reused once this returns; a GPU copies it beside the work queued before it. */
void eng_upload_images(eng_backend *be, const eng_tensor *x, const uint8_t *src, int src_c, const int *map,
                       const float norm[9]);

/* ---- layers ---------------------------------------------------------------------------------- */

/* y = max(x, 0). Backward from y (as PyTorch's in-place ReLU does): dx += dy · [y > 0]. */
void eng_relu_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_relu_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx);

/* y = sigmoid(x) = 1 / (1 + e^{−x}) (torch.sigmoid), in float as PyTorch's cpu kernel: a large
 * −x makes e^{−x} infinite and y 0, never NaN. Backward from y (the output, as PyTorch's):
 * dx += dy·(1 − y)·y. x and y may be the same tensor. */
void eng_sigmoid_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_sigmoid_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx);

/* y = x·sigmoid(x) (torch.nn.SiLU, "swish"), computed x / (1 + e^{−x}) as PyTorch does. Backward
 * from x (the input): dx += dy·s·(1 + x·(1 − s)), s = sigmoid(x). */
void eng_silu_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_silu_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy, const eng_tensor *dx);

/* Squeeze-and-excitation's product: y[n, c, h, w] = x[n, c, h, w]·s[n, c] for x N×C×H×W and s
 * N×C×1×1 (or N×C). The forward takes x and y in the backend's native layout too (both alike; s
 * stays logical), so an evaluation trunk's squeeze-excitation reads and writes it in place.
 * Backward (logical tensors): dx += dy·s, ds[n, c] += Σ_{h,w} dy·x (summed in double, then added
 * as float); dx or ds may be NULL. */
void eng_channel_scale_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *s, const eng_tensor *y);
void eng_channel_scale_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *s, const eng_tensor *dy,
                                const eng_tensor *dx, const eng_tensor *ds);

/* y = x·Wᵀ + b for x N×I, W O×I, b O (may be NULL). */
void eng_linear_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *w, const eng_tensor *b,
                       const eng_tensor *y);
/* dx += dy·W, dW += dyᵀ·x, db += Σ_n dy. dx, dW and db may each be NULL (a loss's product
 * against a constant matrix needs dx alone). */
void eng_linear_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *w, const eng_tensor *dy,
                        const eng_tensor *dx, const eng_tensor *dw, const eng_tensor *db);

/* y = a + b (residual add). Backward: da += dy, db += dy (either may be NULL). */
void eng_add_forward(eng_backend *be, const eng_tensor *a, const eng_tensor *b, const eng_tensor *y);
void eng_add_backward(eng_backend *be, const eng_tensor *dy, const eng_tensor *da, const eng_tensor *db);
/* The same followed by a ReLU, in one pass: y = max(a + b, 0); the backward takes that y and
 * adds dy·[y > 0] into da and db. (A ResNet block's end; saves a pass and a buffer each way.) */
void eng_add_relu_forward(eng_backend *be, const eng_tensor *a, const eng_tensor *b, const eng_tensor *y);
void eng_add_relu_backward(eng_backend *be, const eng_tensor *y, const eng_tensor *dy, const eng_tensor *da,
                           const eng_tensor *db);

/* Rows of x (N×F) scaled to unit L2 norm, as torch.nn.functional.normalize(x, dim=1,
 * eps=1e-12): y = x / max(‖x‖, eps). */
void eng_l2norm_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_l2norm_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy, const eng_tensor *dx);

/* A memory bank's rows scored against one vector each (NPID's and PIRL's NCE): with idx a host
 * array of n × k row numbers of `bank` (M × D) and x (n × D),
 *   y[i, j] = bank[idx[i·k + j]] · x[i]    (y: n × k; each dot product summed in double),
 * and its backward dx[i] += Σ_j dy[i, j] · bank[idx[i·k + j]] (the bank takes no gradient: it
 * is a constant of the step, as VISSL's detached index_select). A row number outside the bank
 * is a programming error. */
void eng_bank_scores_forward(eng_backend *be, const eng_tensor *bank, const int64_t *idx, const eng_tensor *x,
                             const eng_tensor *y);
void eng_bank_scores_backward(eng_backend *be, const eng_tensor *bank, const int64_t *idx, const eng_tensor *dy,
                              const eng_tensor *dx);

/* Inverted dropout in training: each element is kept with probability 1-p and scaled by
 * 1/(1-p); the keep mask is a pure function of (seed, step, element index), so backward
 * recomputes it instead of storing it. p = 0 copies. */
void eng_dropout_forward(eng_backend *be, float p, uint64_t step, const eng_tensor *x, const eng_tensor *y);
void eng_dropout_backward(eng_backend *be, float p, uint64_t step, const eng_tensor *dy, const eng_tensor *dx);

/* ---- losses ------------------------------------------------------------------------------------ */

/* Each loss returns its value to the host and WRITES (not adds) its gradient with respect to
 * its input: the seed of the backward. Values are summed in double. */

/* A contrastive (InfoNCE) loss over logits L = scale·x (x R × C), with 0/1 masks of the same shape marking
 * each row's positive columns P_r and negative columns N_r (a column may be neither):
 *   loss = −(1/Z) Σ_r Σ_{p∈P_r} log( e^{L_rp} / (e^{L_rp} + Σ_{n∈N_r} e^{L_rn}) ),  Z = Σ_r |P_r|.
 * No max is subtracted (VISSL's SimCLR losses exponentiate cosines / T directly). */
double eng_info_nce(eng_backend *be, const eng_tensor *logits, float scale, const eng_tensor *pos,
                    const eng_tensor *neg, const eng_tensor *dlogits);

/* torch.nn.functional.cross_entropy(scale·x, target, weight, ignore_index), reduction mean
 * (weighted: Σ w_t·ℓ / Σ w_t over the rows whose target is not ignore_index; NaN when every
 * row is ignored, as torch gives). x is N × C; target (N) and weight (C, or NULL) are host
 * arrays. A target outside [0, C) other than ignore_index is a programming error. */
double eng_cross_entropy(eng_backend *be, const eng_tensor *x, float scale, const int64_t *target,
                         const float *weight, int64_t ignore_index, const eng_tensor *dx);

/* VISSL's bce_logits_multiple_output_single_target for one output: BCE-with-logits per
 * element, zero where the target is −1, each class column divided by its number of targets
 * other than −1 (at least 1), all summed. x is N × C, target a host N × C array of 0, 1, −1. */
double eng_bce_logits(eng_backend *be, const eng_tensor *x, const int64_t *target, const eng_tensor *dx);

/* SwAV's codes (VISSL's distributed_sinkhornknopp). The assignment matrix A = exp(x/ε − max)
 * over the scores x (n × K) with the rows of `queue` (m × K, or NULL) appended below them is
 * scaled to total 1, then `iters` times each prototype's column to 1/K (a zero column first
 * gets 1e-12 added everywhere; an infinite factor becomes the largest finite one) and each row
 * to 1/(W·(n + m)); q (n × K) gets the first n rows, each divided by its sum, or with `hard`
 * the one-hot of each row's largest entry (temp_hard_assignment_iters). With a reducer (W
 * ranks, each with its own n + m rows) the max, the total and the column sums are every
 * rank's; NULL: one rank (W = 1). 0, or -1 when the reducer failed (q unspecified). */
int eng_sinkhorn(eng_backend *be, const eng_tensor *x, const eng_tensor *queue, double epsilon, int iters,
                 bool hard, const eng_tensor *q, const eng_reducer *across);

/* −Σ_rows Σ_k q_k·log_softmax(scale·x)_k, a cross-entropy against soft targets q (both N × C),
 * summed over the rows. Unlike the losses above it ADDS g·∂/∂x to dx: in SwAV's swapped
 * prediction one crop's scores are predicted against several crops' codes. */
double eng_soft_cross_entropy(eng_backend *be, const eng_tensor *x, float scale, const eng_tensor *q, double g,
                              const eng_tensor *dx);

/* ---- optimizer updates ------------------------------------------------------------------------- */

/* One parameter tensor's update, in PyTorch's float32 steps (torch.optim, v1.13, dampening 0,
 * maximize off). Tensors p, g and the state share one shape; g is read only. */
typedef struct {
    float lr, weight_decay, momentum;
    float grad_scale; /* LARC's local rate; 1 otherwise */
    bool nesterov;
    bool first;       /* the momentum buffer does not exist yet: it becomes d */
} eng_sgd_args;
/* SGD: d = (g + weight_decay·p)·grad_scale; buf = first ? d : momentum·buf + d;
 * p -= lr·(nesterov ? d + momentum·buf : buf). momentum 0: p -= lr·d and buf is not touched
 * (may be NULL). */
void eng_sgd_step(eng_backend *be, const eng_sgd_args *a, const eng_tensor *p, const eng_tensor *g,
                  const eng_tensor *buf);

typedef struct {
    double lr, weight_decay, beta1, beta2, eps; /* Python floats in torch: double where torch
                                                   computes with them, float32 where a tensor
                                                   operation takes them */
    bool decoupled; /* AdamW: p *= 1 − lr·weight_decay first; Adam: g + weight_decay·p */
    int64_t step;   /* 1 at the first update (bias corrections) */
} eng_adam_args;
/* Adam / AdamW (amsgrad off): m = β1·m + (1−β1)·g', v = β2·v + (1−β2)·g'², p −= lr/(1−β1^t) ·
 * m / (√v / √(1−β2^t) + eps). m and v start at zero. */
void eng_adam_step(eng_backend *be, const eng_adam_args *a, const eng_tensor *p, const eng_tensor *g,
                   const eng_tensor *m, const eng_tensor *v);

/* A whole optimizer step in one call: item i is what eng_sgd_step / eng_adam_step would do
 * to tensor p (buf NULL without momentum). The backend spreads all the items' elements over
 * its threads at once (one kernel on a GPU), where a call per tensor would pay a parallel
 * region, or a launch, per tensor. The result is bitwise the per-tensor calls'. */
typedef struct {
    eng_sgd_args a;
    const eng_tensor *p, *g, *buf;
} eng_sgd_item;
typedef struct {
    eng_adam_args a;
    const eng_tensor *p, *g, *m, *v;
} eng_adam_item;
void eng_sgd_step_many(eng_backend *be, const eng_sgd_item *items, int n);
void eng_adam_step_many(eng_backend *be, const eng_adam_item *items, int n);

/* A momentum encoder's parameters following the model's (MoCo, SwAV's momentum encoder):
 * dst = dst·m + src·(1 − m) elementwise, each product rounded to float32 and then their sum, as
 * PyTorch's `k * m + q * (1 - m)` on float32 tensors with m and 1 − m taken to float32. src and
 * dst have one shape (whole parameter allocations, model_params). */
void eng_ema(eng_backend *be, double momentum, const eng_tensor *src, const eng_tensor *dst);

/* x = alpha·x elementwise, each product rounded to float32 (DeepClusterV2's mean over its
 * heads, applied to the gradient the heads' terms added up). */
void eng_scale(eng_backend *be, float alpha, const eng_tensor *x);

/* For each row of x (N × C), the column of its largest value, the first among equals (torch's
 * max(dim=1) on rows without NaN), into the host array out[N]: DeepClusterV2's k-means E-step
 * on the memory's scores against the centroids. */
void eng_argmax_rows(eng_backend *be, const eng_tensor *x, int64_t *out);

/* Σ x², summed in double, to the host (LARC's norms). */
double eng_sum_squares(eng_backend *be, const eng_tensor *x);
/* out[i] = eng_sum_squares(xs[i]) for n tensors, in one call: a GPU waits once for all of them
 * instead of once per tensor (LARC needs two norms per parameter tensor every step). */
void eng_sum_squares_many(eng_backend *be, const eng_tensor *const *xs, int n, double *out);

/* ---- convolution ------------------------------------------------------------------------------ */

/* PyTorch's Conv2d arguments; the kernel size comes from the weight's shape
 * (O × I/groups × KH × KW). pad_extra makes the padding asymmetric: pad[i] zeros above (left
 * of) the input and pad[i] + pad_extra[i] below (right of) it, what F.conv2d(F.pad(x, (pad_w,
 * pad_w + extra_w, pad_h, pad_h + extra_h)), w) computes: TensorFlow's "same" padding, whose
 * odd total puts the extra zero at the end (EfficientNet's stride-2 depthwise convolutions). */
typedef struct {
    int64_t stride[2], pad[2], dilation[2]; /* (h, w); 0 in stride/dilation means 1 */
    int64_t groups;                         /* 0 means 1 */
    int64_t pad_extra[2]; /* extra zero rows/columns at the bottom/right beyond pad (TensorFlow's "same"
                             padding, ClassyVision's Conv2dSamePadding); 0: symmetric */
} eng_conv_desc;

/* A backend's prepared state for one layer at one input shape (oneDNN primitives today,
 * cuDNN algorithms and workspace later): made once when activation memory is planned and
 * reused every step, so the steady-state step allocates nothing. */
typedef struct eng_plan eng_plan;
void eng_plan_free(eng_backend *be, eng_plan *plan);

/* N × O × OH × OW for input x and weight w; aborts on an impossible geometry. */
eng_shape eng_conv_output_shape(const eng_shape *x, const eng_shape *w, const eng_conv_desc *d);
eng_plan *eng_conv_plan(eng_backend *be, const eng_conv_desc *d, const eng_shape *x, const eng_shape *w,
                        bool bias);
/* y = conv(x, w) + b (b may be NULL when the plan has no bias). */
void eng_conv_forward(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                      const eng_tensor *b, const eng_tensor *y);
/* dx += ∂, dw += ∂, db += ∂ (dx and db may be NULL). */
void eng_conv_backward(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                       const eng_tensor *dy, const eng_tensor *dx, const eng_tensor *dw, const eng_tensor *db);
/* The activation a fused evaluation convolution applies last. */
typedef enum { ENG_EVAL_ACT_NONE = 0, ENG_EVAL_ACT_RELU, ENG_EVAL_ACT_SILU } eng_eval_act;

/* Evaluation only: y = act(BN_eval(conv(x, w)) [+ residual]) in one step, batch norm with its
 * running statistics (gamma/beta NULL: 1/0); residual may be NULL; act none, ReLU or SiLU. The
 * same values as conv, batchnorm_forward_eval, add and relu (silu) one after another, up to
 * float rounding (the backend may fold the norm into the weights, and its SiLU may round
 * differently from eng_silu_forward), with one known difference: the cpu backend's fused ReLU
 * (oneDNN's post-op, a max with 0) turns NaN into 0 where PyTorch's relu keeps NaN, so a NaN
 * reaching an eval-mode trunk does not always reach its output. The plan must have no bias. */
void eng_conv_bn_forward_eval(eng_backend *be, eng_plan *plan, const eng_tensor *x, const eng_tensor *w,
                              double eps, const eng_tensor *gamma, const eng_tensor *beta, const eng_tensor *mean,
                              const eng_tensor *var, const eng_tensor *residual, eng_eval_act act,
                              const eng_tensor *y);

/* ---- batch norm ---------------------------------------------------------------------------- */

/* BatchNorm2d over N × C × H × W (or BatchNorm1d over N × C), PyTorch's semantics.
 * Training: normalise with the batch's mean and biased variance; update the running stats
 * in place, running = (1 − momentum)·running + momentum·batch, with the UNBIASED variance
 * (n/(n−1)) as PyTorch does; keep the batch mean and 1/sqrt(var + eps) in save_mean and
 * save_invstd (C each) for the backward. Eval: normalise with the running stats.
 *
 * SyncBN (torch's SyncBatchNorm) when `across` is a reducer over the ranks of a group: the
 * batch is every rank's batch. The forward's statistics come from sums over the group (the
 * values' count and Σx, then Σ(x − mean)²: the two passes of one batch), the running stats
 * are updated with them, and the backward's dx uses the group's Σg and Σg·x̂ over the group's
 * count, while dγ and dβ take this rank's own sums (as torch's, which DDP then averages).
 * NULL: this rank's batch alone. A reducer that fails leaves the rank's own values; the
 * caller keeps its error and checks it after the pass. */
void eng_batchnorm_forward_train(eng_backend *be, double momentum, double eps, const eng_tensor *x,
                                 const eng_tensor *gamma, const eng_tensor *beta,
                                 const eng_tensor *running_mean, const eng_tensor *running_var,
                                 const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                 const eng_tensor *y, const eng_reducer *across);
void eng_batchnorm_forward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                const eng_tensor *beta, const eng_tensor *running_mean,
                                const eng_tensor *running_var, const eng_tensor *y);
/* Backward of the training forward (mean and invstd from save_*): dx, dgamma, dbeta
 * accumulate; dx may be NULL. `across`: the forward's. */
void eng_batchnorm_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                            const eng_tensor *save_mean, const eng_tensor *save_invstd, const eng_tensor *dy,
                            const eng_tensor *dx, const eng_tensor *dgamma, const eng_tensor *dbeta,
                            const eng_reducer *across);

/* Batch norm followed by a ReLU, in one pass each way: y = max(BN(x), 0); the backward takes
 * that y and runs batch norm's backward on dy·[y > 0]. Same arguments and results as
 * batch norm then relu; fewer passes over memory and no buffer between them. */
void eng_batchnorm_relu_forward_train(eng_backend *be, double momentum, double eps, const eng_tensor *x,
                                      const eng_tensor *gamma, const eng_tensor *beta,
                                      const eng_tensor *running_mean, const eng_tensor *running_var,
                                      const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                      const eng_tensor *y, const eng_reducer *across);
void eng_batchnorm_relu_forward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                     const eng_tensor *beta, const eng_tensor *running_mean,
                                     const eng_tensor *running_var, const eng_tensor *y);
void eng_batchnorm_relu_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                                 const eng_tensor *save_mean, const eng_tensor *save_invstd,
                                 const eng_tensor *y, const eng_tensor *dy, const eng_tensor *dx,
                                 const eng_tensor *dgamma, const eng_tensor *dbeta,
                                 const eng_reducer *across);

/* Backward of the EVAL forward (normalised with the running statistics, which are constants):
 * with x̂ = (x − running_mean)/sqrt(running_var + eps),
 *   dx += dy·γ/sqrt(running_var + eps),  dγ += Σ dy·x̂,  dβ += Σ dy.
 * What a frozen-BN trunk (BN in eval mode) needs to still pass gradients to earlier layers.
 * dx, dgamma, dbeta may each be NULL (skipped); gamma NULL means γ = 1. */
void eng_batchnorm_backward_eval(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                                 const eng_tensor *running_mean, const eng_tensor *running_var,
                                 const eng_tensor *dy, const eng_tensor *dx, const eng_tensor *dgamma,
                                 const eng_tensor *dbeta);

/* ---- layer norm ------------------------------------------------------------------------------ */

/* VISSL's LayerNorm2d(C, eps, affine=True) = nn.GroupNorm(1, C): each SAMPLE is normalised over
 * all of its C×H×W values (biased variance), then scaled and shifted PER CHANNEL:
 *   y[n,c,s] = (x[n,c,s] − mean_n)·invstd_n·γ[c] + β[c],  invstd_n = 1/sqrt(var_n + eps).
 * No running statistics: training and evaluation are the same computation. x is N×C×H×W
 * (or N×C); gamma/beta are C long (NULL: affine-free); save_mean and save_invstd are N long,
 * kept for the backward (NULL: not kept). */
void eng_layernorm2d_forward(eng_backend *be, double eps, const eng_tensor *x, const eng_tensor *gamma,
                             const eng_tensor *beta, const eng_tensor *save_mean, const eng_tensor *save_invstd,
                             const eng_tensor *y);
/* With x̂ from save_*, M = C·H·W values per sample and g = dy·γ[c]:
 *   dβ[c] += Σ_{n,s} dy,  dγ[c] += Σ_{n,s} dy·x̂,  dx += invstd_n/M · (M·g − Σ g − x̂·Σ g·x̂) per sample.
 * dx, dgamma, dbeta may each be NULL (skipped). */
void eng_layernorm2d_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *gamma,
                              const eng_tensor *save_mean, const eng_tensor *save_invstd, const eng_tensor *dy,
                              const eng_tensor *dx, const eng_tensor *dgamma, const eng_tensor *dbeta);

/* ---- local response normalisation -------------------------------------------------------------- */

/* PyTorch's LocalResponseNorm(size, alpha, beta, k) across the channels of x (N×C×H×W; AlexNet's):
 *   y[n, c] = x[n, c] / s[n, c]^β,  s[n, c] = k + α/size · Σ_{c'} x[n, c']²,
 * c' from c − ⌊size/2⌋ to c + ⌊(size − 1)/2⌋, clipped to [0, C): PyTorch pads the squares with
 * zero channels and averages them over `size` whatever the clipping. size must be odd: PyTorch's
 * window for an even size has one more channel below c than above, where oneDNN's (the cpu
 * backend's) is centred on size − 1 channels, so an even size aborts (invariant_failed) rather
 * than give two answers. y must not be x (the window reads x's neighbouring channels). */
typedef struct {
    int64_t size;          /* channels in the window, odd */
    double alpha, beta, k; /* k: PyTorch's default 1 */
} eng_lrn_desc;
void eng_lrn_forward(eng_backend *be, const eng_lrn_desc *d, const eng_tensor *x, const eng_tensor *y);
/* dx += ∂ (dx may be NULL: nothing). Recomputed from x (nothing saved), as eng_maxpool_backward:
 *   dx[c] += dy[c]·s[c]^(−β) − (2αβ/size)·x[c]·Σ_{c': c in the window of c'} dy[c']·x[c']·s[c']^(−β−1). */
void eng_lrn_backward(eng_backend *be, const eng_lrn_desc *d, const eng_tensor *x, const eng_tensor *dy,
                      const eng_tensor *dx);

/* ---- pooling ---------------------------------------------------------------------------------- */

/* PyTorch's MaxPool2d / AvgPool2d arguments (dilation 1). */
typedef struct {
    int64_t kernel[2], stride[2], pad[2]; /* stride 0 means = kernel, as PyTorch's default */
    bool ceil_mode;
    bool count_include_pad;               /* AvgPool2d's, PyTorch default true: set it */
} eng_pool_desc;

eng_shape eng_pool_output_shape(const eng_shape *x, const eng_pool_desc *d);
void eng_maxpool_forward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *y);
/* The gradient goes to the first maximum of each window (PyTorch's choice); it is found again
 * from x rather than stored. dx += ∂. */
void eng_maxpool_backward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *dy,
                          const eng_tensor *dx);
void eng_avgpool_forward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *x, const eng_tensor *y);
void eng_avgpool_backward(eng_backend *be, const eng_pool_desc *d, const eng_tensor *dy, const eng_tensor *dx);
/* Adaptive pools: the output size is y's H × W; window i spans
 * [floor(i·in/out), ceil((i+1)·in/out)) as in PyTorch. */
void eng_adaptive_avgpool_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_adaptive_avgpool_backward(eng_backend *be, const eng_tensor *dy, const eng_tensor *dx);
void eng_adaptive_maxpool_forward(eng_backend *be, const eng_tensor *x, const eng_tensor *y);
void eng_adaptive_maxpool_backward(eng_backend *be, const eng_tensor *x, const eng_tensor *dy,
                                   const eng_tensor *dx);

#ifdef __cplusplus
}
#endif

#endif
