/*
 * trunk_bench.c — the model engine's speed on its trunks (bench/trunks.sh runs it beside
 * bench/trunk_bench.py, PyTorch doing the same work).
 *
 *   trunk_bench --depth 50 --size 224 --batch 16 [--small-stem] [--winograd] [--threads N] [--reps N]
 *   trunk_bench --regnet regnet_y_400mf --size 224 --batch 16 [--threads N] [--reps N]
 *   trunk_bench --efficientnet B0 --size 224 --batch 16 [--threads N] [--reps N]
 *   trunk_bench --alexnet rotnet --size 224 --batch 64 [--threads N] [--reps N]
 *
 * Prints "trunk_bench MODE images_per_second" for MODE = train (forward in train mode +
 * backward into the gradient buffer; no optimizer step on either side) and infer (forward in
 * eval mode), each the median of --reps timed runs after one warm-up.
 */
#include "test_hooks.h"
#include "timer.h"
#include "trunk.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int depth, size, batch, threads, reps;
    bool small_stem, winograd;
    const char *regnet;       /* a ClassyVision preset, or NULL */
    const char *efficientnet; /* an EfficientNet model_version, or NULL */
    const char *alexnet;      /* an AlexNet variant (rotnet, bvlc, ...), or NULL */
} options;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of `reps` runs of one step, after a warm-up. */
static double time_steps(eng_backend *be, trunk *net, const eng_tensor *x, const eng_tensor *dfeat, bool train,
                         int reps)
{
    double t[32];
    for (int i = -1; i < reps; i++) {
        double t0 = now_seconds();
        trunk_forward(be, net, x, train);
        if (train)
            trunk_backward(be, net, dfeat);
        if (i >= 0)
            t[i] = now_seconds() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

static options parse(int argc, char **argv)
{
    options o = {.depth = 50, .size = 224, .batch = 16, .reps = 3};
    static const struct option longs[] = {
        {"depth", required_argument, NULL, 'd'}, {"size", required_argument, NULL, 's'},
        {"batch", required_argument, NULL, 'b'}, {"threads", required_argument, NULL, 't'},
        {"reps", required_argument, NULL, 'r'},  {"small-stem", no_argument, NULL, 'S'},
        {"regnet", required_argument, NULL, 'g'},
        {"efficientnet", required_argument, NULL, 'e'}, {"alexnet", required_argument, NULL, 'a'},
        {"winograd", no_argument, NULL, 'w'},   {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'd': o.depth = atoi(optarg); break;
        case 's': o.size = atoi(optarg); break;
        case 'b': o.batch = atoi(optarg); break;
        case 't': o.threads = atoi(optarg); break;
        case 'r': o.reps = atoi(optarg); break;
        case 'S': o.small_stem = true; break;
        case 'g': o.regnet = optarg; break;
        case 'e': o.efficientnet = optarg; break;
        case 'a': o.alexnet = optarg; break;
        case 'w': o.winograd = true; break;
        default: fprintf(stderr, "usage: trunk_bench [--depth N | --regnet NAME | --efficientnet B0..B7 | --alexnet VARIANT] "
                                 "[--size N] [--batch N] "
                                 "[--threads N] [--reps N] [--small-stem] [--winograd]\n");
                 exit(2);
        }
    }
    if (o.reps < 1 || o.reps > 32)
        o.reps = 3;
    return o;
}

static trunk_options trunk_of(const options *o)
{
    trunk_options t = trunk_defaults();
    t.resnet.depth = o->depth;
    t.resnet.small_stem = o->small_stem;
    if (o->regnet) {
        t.kind = TRUNK_REGNET;
        if (regnet_preset(o->regnet, &t.regnet) != 0) {
            fprintf(stderr, "trunk_bench: no RegNet preset %s\n", o->regnet);
            exit(2);
        }
    }
    if (o->efficientnet) {
        t.kind = TRUNK_EFFICIENTNET;
        if (efficientnet_preset(o->efficientnet, &t.efficientnet) != 0) {
            fprintf(stderr, "trunk_bench: no EfficientNet %s\n", o->efficientnet);
            exit(2);
        }
    }
    if (o->alexnet) {
        char *name = xasprintf("alexnet_%s", o->alexnet);
        int v = alexnet_variant_by_name(name);
        free(name);
        if (v < 0) {
            fprintf(stderr, "trunk_bench: no AlexNet %s\n", o->alexnet);
            exit(2);
        }
        t.kind = TRUNK_ALEXNET;
        t.alexnet = (alexnet_variant)v;
    }
    return t;
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    char *err = NULL;
    eng_backend_options bopt = {.threads = o.threads, .winograd = o.winograd};
    eng_backend *be = eng_backend_open("cpu", &bopt, &err);
    trunk_options topt = trunk_of(&o);
    trunk *net = be ? trunk_new(be, &topt, 0, &err) : NULL;
    if (!net) {
        fprintf(stderr, "trunk_bench: %s\n", err);
        return 1;
    }
    eng_shape xs = eng_shape4(o.batch, 3, o.size, o.size);
    eng_tensor x = eng_tensor_new(be, xs);
    float *host = xmalloc((size_t)eng_numel(&xs) * sizeof *host);
    for (int64_t i = 0; i < eng_numel(&xs); i++)
        host[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    eng_upload(be, &x, host);
    trunk_plan(be, net, &xs);
    eng_tensor dfeat = eng_tensor_new(be, eng_shape2(o.batch, trunk_out_dim(net)));
    eng_zero(be, &dfeat);
    double train = time_steps(be, net, &x, &dfeat, true, o.reps);
    double infer = time_steps(be, net, &x, NULL, false, o.reps);
    printf("trunk_bench train %.3f\ntrunk_bench infer %.3f\n", o.batch / train, o.batch / infer);
    free(host);
    eng_tensor_free(be, &x);
    eng_tensor_free(be, &dfeat);
    trunk_free(be, net);
    eng_backend_close(be);
    return 0;
}
