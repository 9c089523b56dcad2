/*
 * model.h — VISSL's whole model (BaseSSLMultiInputOutputModel, vissl/models/base_ssl_model.py) on the model
 * engine: a trunk, its heads, and how a step's inputs flow through them, built from
 * config.MODEL.
 *
 * Inputs. A step hands the model a list of input tensors, each N_i × 3 × H_i × W_i in RGB (the
 * model applies MODEL.INPUT_TYPE itself: bgr reverses the channels, lab keeps channel 0):
 *   - without MULTI_INPUT_HEAD_MAPPING they are the crops of one batch, VISSL's "multi-res"
 *     list: consecutive crops of one resolution go through the trunk together (one pass per
 *     group; one per crop with SINGLE_PASS_EVERY_CROP), the group features are concatenated
 *     in crop order, then the heads run once on the concatenation;
 *   - with the mapping, input i is the mapping's i-th key ("images", "patches"); it goes
 *     through the trunk, the mapping's feature names are read from it and head i runs on them.
 * The caller writes each input into model_input(m, i), a view the model planned inside its
 * group's batch, so nothing is copied on the way into the trunk.
 *
 * Trunk outputs. A normal model reads the trunk's last feature (`flatten`). A feature
 * extractor (EVAL_MODE_ON, FREEZE_TRUNK_ONLY and a non-empty LINEAR_EVAL_FEAT_POOL_OPS_MAP)
 * reads every layer of the map, each pooled by its op (AvgPool2d, MaxPool2d,
 * AdaptiveAvgPool2d, AdaptiveMaxPool2d, Identity) and flattened unless SHOULD_FLATTEN_FEATS
 * is off; its trunk tensors are named "trunk.base_model._feature_blocks.…" as in VISSL.
 * EVAL_MODE_ON with EXTRACT_TRUNK_FEATURES_ONLY returns those features and runs no head.
 *
 * Heads (VISSL's heads_forward): with as many features as head entries, head i reads
 * feature i; with one feature and several entries, the entries run one after another. An
 * entry that is itself a list of [name, kwargs] pairs is a chain (nn.Sequential): its tensors
 * are "heads.I.J.…", a single head's are "heads.I.…".
 *
 * Freezing (only with EVAL_MODE_ON, as VISSL): FREEZE_TRUNK_ONLY freezes the trunk,
 * FREEZE_TRUNK_AND_HEAD both. A frozen part gets no gradient and always runs in eval mode
 * (running statistics, no dropout), even in a training step — VISSL keeps a feature
 * extractor's trunk in eval mode too, but leaves the BN of a trunk frozen without pool ops in
 * train mode; selfsup does not update the running statistics of weights it was told to keep.
 *
 * Memory (docs/ARCHITECTURE.md): every parameter of the trunk and the heads lives in ONE backend
 * allocation, every gradient in another, every buffer (BN running statistics) in a third,
 * in VISSL's state-dict order (trunk, then heads), so one all-reduce, one optimizer pass and
 * one checkpoint write cover the model. model_entry_at gives them with full VISSL names
 * ("trunk._feature_blocks.conv1.weight", "heads.0.clf.0.weight"). Activation memory is
 * planned once per input shape list (model_plan); forward and backward then allocate nothing.
 */
#ifndef SELFSUP_NN_MODEL_H
#define SELFSUP_NN_MODEL_H

#include "complexity.h"
#include "config.h"
#include "heads.h"
#include "nn.h"
#include "params.h"
#include "trunk.h"
#include "weights.h"

#include <stdbool.h>
#include <stdint.h>

#define MODEL_MAX_HEADS 8      /* entries of MODEL.HEAD.PARAMS */
#define MODEL_MAX_CHAIN 8      /* heads in one chained entry */
#define MODEL_MAX_INPUTS 16    /* crops of a batch, or mapping entries */
#define MODEL_MAX_FEATURES 8   /* pool-op layers, or feature names of one mapping entry */

typedef enum { MODEL_INPUT_RGB, MODEL_INPUT_BGR, MODEL_INPUT_LAB } model_input_type;

typedef enum {
    MODEL_POOL_IDENTITY,
    MODEL_POOL_AVG,
    MODEL_POOL_MAX,
    MODEL_POOL_ADAPTIVE_AVG,
    MODEL_POOL_ADAPTIVE_MAX,
} model_pool_kind;

/* One entry of LINEAR_EVAL_FEAT_POOL_OPS_MAP: [layer, [op, args]]. */
typedef struct {
    int layer;           /* a trunk feature (trunk.h: network order) */
    model_pool_kind kind;
    eng_pool_desc pool;  /* AvgPool2d / MaxPool2d (PyTorch's defaults for omitted args) */
    int64_t out_hw[2];   /* adaptive pools: the output size */
} model_pool_op;

/* One entry of MODEL.HEAD.PARAMS: a head, or a chain of heads (nested list). */
typedef struct {
    head_options chain[MODEL_MAX_CHAIN];
    int n;
    bool nested; /* written as a list of pairs: tensors are "heads.I.J.…" */
} model_head_entry;

typedef struct {
    trunk_options trunk;
    model_input_type input_type;
    model_head_entry heads[MODEL_MAX_HEADS];
    int nheads;
    double head_params_multiplier; /* MODEL.HEAD.PARAMS_MULTIPLIER: mlp weights and biases */
    /* MULTI_INPUT_HEAD_MAPPING: entry i names input i and the trunk features head i reads. */
    int nmapping;
    struct {
        char key[32];
        int feat[MODEL_MAX_FEATURES]; /* trunk features */
        int nfeat;
    } mapping[MODEL_MAX_HEADS];
    bool single_pass_every_crop;
    /* FEATURE_EVAL_SETTINGS */
    bool eval_mode_on, freeze_trunk_only, freeze_trunk_and_head, extract_trunk_features_only;
    bool eval_trunk_and_head, should_flatten_feats;
    model_pool_op pool_ops[MODEL_MAX_FEATURES];
    int npool_ops;
} model_options;

/* A ResNet-50 with no heads and every VISSL default. */
model_options model_defaults(void);

/* Read config.MODEL (the composed config's "config.MODEL" map) into *out (model_config.c).
 * Returns false with a "file:line: key: why" message for what this engine cannot build:
 * another trunk, an unknown head or head argument, a bad pool op, a mapping whose length is
 * not the number of heads. */
bool model_options_from_config(const cfg_node *model_cfg, model_options *out, cfg_err *err);

/* config.MODEL.WEIGHTS_INIT, with the model facts VISSL adds when it loads (vissl/utils/checkpoint.py):
 * a feature extractor's trunk is named "trunk.base_model.…", and in eval mode
 * (FEATURE_EVAL_SETTINGS.EVAL_MODE_ON) the heads are loaded only with EVAL_TRUNK_AND_HEAD.
 * The strings point into the config, which must outlive it. */
#define MODEL_MAX_SKIP_LAYERS 64
typedef struct {
    weights_init_options opt; /* opt.skip_layers is set by model_load_weights */
    const char *skip[MODEL_MAX_SKIP_LAYERS];
} model_weights_init;

/* Read config.MODEL.WEIGHTS_INIT for a model of options `o` (model_config.c). Returns false
 * with a "file:line: key: why" message for a value of the wrong kind. */
bool model_weights_init_from_config(const cfg_node *model_cfg, const model_options *o, model_weights_init *out,
                                    cfg_err *err);

/* VISSL's is_feature_extractor_model. */
bool model_is_feature_extractor(const model_options *o);
/* Trunk frozen / heads frozen, as this model applies FEATURE_EVAL_SETTINGS. */
bool model_trunk_frozen(const model_options *o);
bool model_heads_frozen(const model_options *o);

typedef struct model model;

/* Build the trunk and the heads, initialised (PyTorch's default init, from `seed`), with all
 * tensors re-homed into the model's three allocations. NULL with *err for impossible options. */
model *model_new(eng_backend *be, const model_options *o, uint64_t seed, char **err);
void model_free(eng_backend *be, model *m);
const model_options *model_opts(const model *m);

/* MACHINE.DEVICE's backend: "cpu" → "cpu", "gpu" → "cuda"; NULL for anything else. */
const char *model_backend_for_device(const char *device);
/* The backend MACHINE.DEVICE names (`threads` cpu threads, 0: every core; on a GPU, GPU
 * `local_rank`), seeded with SEED_VALUE. False with err at config.MACHINE.DEVICE saying why:
 * a build without CUDA, no GPU, a local rank past the machine's GPUs. */
bool model_backend_open(const cfg_node *config, int threads, int local_rank, eng_backend **be, cfg_err *err);

/* The backend (model_backend_open) and the model of the composed `config` on it:
 * PyTorch's default init from SEED_VALUE, then MODEL.WEIGHTS_INIT — what the trainer and the
 * extractor both start from. False with err at config.MODEL or config.MACHINE.DEVICE, and
 * nothing left open. */
bool model_build_from_config(const cfg_node *config, int threads, int local_rank, eng_backend **be, model **m,
                             cfg_err *err);

/* What model_build_from_config checks, in its order, without keeping anything: config.MODEL's
 * options, WEIGHTS_INIT (a PARAMS_FILE is read into the model built on the cpu, so a file for
 * another model is refused here, not when the run starts), and the device, opened and closed
 * at once (whether a GPU is there, and usable at this local rank, is known no other way). For
 * validate, `selfsup run`'s preflight and the stages' dry starts. */
bool model_check_config(const cfg_node *config, int local_rank, cfg_err *err);

/* Load w's PARAMS_FILE into the model (weights.h: the whole file is checked first, so a
 * refused file changes nothing). An empty PARAMS_FILE keeps the initialisation and returns 0.
 * Returns -1 with *err naming the file and the keys. */
int model_load_weights(eng_backend *be, model *m, const model_weights_init *w, char **err);

/* Every named tensor, trunk then heads, with full VISSL names. */
int model_entry_count(const model *m);
const eng_entry *model_entry_at(const model *m, int i);
/* The three allocations as 1-D views (base NULL when empty) and the parameter count. */
eng_tensor model_params(const model *m);
eng_tensor model_grads(const model *m);
eng_tensor model_buffers(const model *m);
int64_t model_param_count(const model *m);
void model_zero_grad(eng_backend *be, model *m);
/* The parts, for tests and for tools that need one of them. */
trunk *model_trunk(const model *m);
int model_head_entry_count(const model *m);

/* Plan for this list of inputs (shapes N_i × 3 × H_i × W_i, before INPUT_TYPE). Returns 0, or
 * -1 with *err when the list cannot go through the model (a count that does not match the
 * mapping, a feature size a head does not take, a trainable trunk asked for gradients of a
 * layer other than its last). The same list again does nothing. */
int model_plan(eng_backend *be, model *m, const eng_shape *inputs, int n, char **err);
/* Input i of the planned list, after INPUT_TYPE (N_i × 3 or 1 × H_i × W_i): write it with
 * eng_upload, or use model_upload_input for host RGB data. */
eng_tensor model_input(const model *m, int i);
/* Upload host fp32 RGB data (N_i × 3 × H_i × W_i, C-contiguous) into input i, applying
 * INPUT_TYPE. */
void model_upload_input(eng_backend *be, model *m, int i, const float *rgb);
/* The same from uint8 RGB images (N_i × H_i × W_i × 3, as batch records hold them) and their
 * record's `normalize` rows: the backend normalises (eng_upload_images), so only the bytes
 * travel to a GPU. */
void model_upload_images(eng_backend *be, model *m, int i, const uint8_t *rgb, const float norm[9]);

/* Forward over the inputs written since model_plan. train: batch statistics, running-stat
 * updates and dropout for the parts that are not frozen. */
void model_forward(eng_backend *be, model *m, bool train);
/* The outputs, flattened in VISSL's nesting order: input by input (one without the
 * mapping), head entry by head entry, each head's outputs in order (swav_head: the embedding,
 * then one score matrix per prototype head). With EXTRACT_TRUNK_FEATURES_ONLY they are the
 * trunk features instead, in the order of the pool-op map. */
int model_output_count(const model *m);
const eng_tensor *model_output(const model *m, int k);
/* Which head entry output k comes from (-1 for a trunk feature), and which input. */
int model_output_head(const model *m, int k);
int model_output_input(const model *m, int k);

/* The training forwards done so far, which key the heads' dropout masks (each training
 * forward advances it): a resumed run sets it to the checkpoint's iteration so its masks are
 * the uninterrupted run's. */
void model_set_train_step(model *m, uint64_t step);
/* SyncBN (MODEL.SYNC_BN_CONFIG): every batch norm of the trunk (each resolution group's pass)
 * and of the heads trains over the ranks of `across` (nn.h), which must outlive the model's use
 * of it; NULL (the default) puts each back on its rank's own batch. */
void model_set_batchnorm_reducer(model *m, const eng_reducer *across);

/* VISSL's model-complexity rows (complexity.h) of the whole model on one `input` (N × C × H
 * × W; the hook's INPUT_SHAPE with N = 1), named as VISSL names the modules: the trunk's
 * ("trunk._feature_blocks.…"), then every head's in MODEL.HEAD.PARAMS order ("heads.I.…"), each
 * head taking the output of the one before it (the first, the trunk's flattened feature). A
 * feature extractor's trunk ("trunk.base_model._feature_blocks.…") runs only up to the deepest
 * layer of LINEAR_EVAL_FEAT_POOL_OPS_MAP, then its pool ops ("trunk.feature_pool_ops.I", op I on
 * the I-th feature in network order, as VISSL pairs them), and head I reads feature I; no head
 * runs with EXTRACT_TRUNK_FEATURES_ONLY. Modules with parameters that are never called follow as
 * "uncalled" rows, so the parameter total is every parameter (count_params). Returns 0, or -1
 * with *err for what is not counted: a head after a swav_head, a feature extractor with
 * MULTI_INPUT_HEAD_MAPPING, a pool op that does not fit its feature. Free the rows with
 * eng_costs_free. */
int model_costs(const model *m, const eng_shape *input, eng_layer_cost **rows, int *n, char **err);

/* Backward of the last training forward: dout[k] is output k's gradient (NULL = zero).
 * Gradients of parameters that are not frozen accumulate into model_grads. */
void model_backward(eng_backend *be, model *m, const eng_tensor *const *dout);
/* The same, telling `ready` (NULL: no one) which of model_grads' entries are final as it goes
 * (params.h: entries [first, model_entry_count)), at every head and trunk block it can, the
 * last time with 0. */
void model_backward_watched(eng_backend *be, model *m, const eng_tensor *const *dout, const eng_grads_ready *ready);

#endif
