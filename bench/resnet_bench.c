/*
 * resnet_bench.c — the model engine's speed on ResNet trunks (bench/resnet.sh runs it beside
 * bench/resnet_bench.py, PyTorch doing the same work).
 *
 *   resnet_bench --depth 50 --size 224 --batch 16 [--small-stem] [--threads N] [--reps N]
 *
 * Prints "resnet_bench MODE images_per_second" for MODE = train (forward in train mode +
 * backward into the gradient buffer; no optimizer step on either side yet) and infer
 * (forward in eval mode), each the median of --reps timed runs after one warm-up.
 */
#include "resnet.h"
#include "timer.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int depth, size, batch, threads, reps;
    bool small_stem;
} options;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of `reps` runs of one step, after a warm-up. */
static double time_steps(eng_backend *be, resnet *net, const eng_tensor *x, const eng_tensor *dfeat, bool train,
                         int reps)
{
    double t[32];
    for (int i = -1; i < reps; i++) {
        double t0 = now_seconds();
        resnet_forward(be, net, x, train);
        if (train)
            resnet_backward(be, net, dfeat);
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
        {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'd': o.depth = atoi(optarg); break;
        case 's': o.size = atoi(optarg); break;
        case 'b': o.batch = atoi(optarg); break;
        case 't': o.threads = atoi(optarg); break;
        case 'r': o.reps = atoi(optarg); break;
        case 'S': o.small_stem = true; break;
        default: fprintf(stderr, "usage: resnet_bench [--depth N] [--size N] [--batch N] [--threads N] "
                                 "[--reps N] [--small-stem]\n");
                 exit(2);
        }
    }
    if (o.reps < 1 || o.reps > 32)
        o.reps = 3;
    return o;
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    char *err = NULL;
    eng_backend_options bopt = {.threads = o.threads};
    eng_backend *be = eng_backend_open("cpu", &bopt, &err);
    resnet_options ropt = resnet_defaults();
    ropt.depth = o.depth;
    ropt.small_stem = o.small_stem;
    resnet *net = be ? resnet_new(be, &ropt, 0, &err) : NULL;
    if (!net) {
        fprintf(stderr, "resnet_bench: %s\n", err);
        return 1;
    }
    eng_shape xs = eng_shape4(o.batch, 3, o.size, o.size);
    eng_tensor x = eng_tensor_new(be, xs);
    float *host = xmalloc((size_t)eng_numel(&xs) * sizeof *host);
    for (int64_t i = 0; i < eng_numel(&xs); i++)
        host[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    eng_upload(be, &x, host);
    resnet_plan(be, net, &xs);
    eng_tensor dfeat = eng_tensor_new(be, eng_shape2(o.batch, resnet_out_dim(net)));
    eng_zero(be, &dfeat);
    double train = time_steps(be, net, &x, &dfeat, true, o.reps);
    double infer = time_steps(be, net, &x, NULL, false, o.reps);
    printf("resnet_bench train %.3f\nresnet_bench infer %.3f\n", o.batch / train, o.batch / infer);
    free(host);
    eng_tensor_free(be, &x);
    eng_tensor_free(be, &dfeat);
    resnet_free(be, net);
    eng_backend_close(be);
    return 0;
}
