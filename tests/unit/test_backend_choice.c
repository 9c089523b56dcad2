/*
 * test_backend_choice.c — MACHINE.DEVICE to a backend, and the refusals a GPU run can meet
 * before anything starts, checked on any machine (with or without CUDA, with or without a GPU).
 *
 * The GPU itself is tested by tests/gpu/ (backend-ops and the runbook); what is here is the
 * host-side logic: the mapping, that an unavailable GPU is a config error (exit 2) naming the
 * key and the reason, and that a local rank past the machine's GPUs is refused.
 */
#include "backend.h"
#include "model.h"
#include "nn.h"
#ifdef HAVE_CUDA
#include "cuda/conv_key.h"
#endif
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(backend_choice, devices_map_to_backends)
{
    cr_expect_str_eq(model_backend_for_device("cpu"), "cpu");
    cr_expect_str_eq(model_backend_for_device("gpu"), "cuda");
    cr_expect_null(model_backend_for_device("tpu"));
    cr_expect_null(model_backend_for_device("GPU"));
}

/* Either this build has no cuda backend, or the machine has no GPU, or it has one: each
 * answer is right in its place, and the first two must say which. */
Test(backend_choice, the_cuda_backend_opens_or_says_why)
{
    char *err = NULL;
    eng_backend *be = eng_backend_open("cuda", NULL, &err);
#ifdef HAVE_CUDA
    if (be) {
        cr_expect_str_eq(eng_backend_name(be), "cuda");
        eng_backend_close(be);
        return;
    }
    cr_expect(err && strstr(err, "GPU"), "%s", err ? err : "(none)");
#else
    cr_expect_null(be);
    cr_expect(err && strstr(err, "unknown backend 'cuda' (this build has: cpu)"), "%s", err ? err : "(none)");
#endif
    free(err);
}

/* The cpu's memory is the host's: the log lines read the process's peak resident size, so
 * the backend has no device peak to report, and a bf16 request is refused, not ignored. */
Test(backend_choice, the_cpu_reports_no_device_memory_and_refuses_bf16)
{
    eng_backend *cpu = eng_backend_open("cpu", &(eng_backend_options){.threads = 1}, NULL);
    eng_tensor t = eng_tensor_new(cpu, eng_shape2(64, 64));
    cr_expect_eq(eng_memory_peak(cpu), 0);
    eng_tensor_free(cpu, &t);
    eng_backend_close(cpu);
    char *err = NULL;
    cr_expect_null(eng_backend_open("cpu", &(eng_backend_options){.threads = 1, .precision = ENG_BF16}, &err));
    cr_expect(err && strstr(err, "mixed precision (bf16) runs on the GPU only"), "%s", err ? err : "(none)");
    free(err);
}

/* Pinning the trainer's input ring is for a device's copies: the cpu, whose tensors are host
 * memory, has nothing to do and says yes, and the memory stays as it was (the cuda backend's
 * cudaHostRegister runs in the GPU runbook's benchmark, bench/gpu_train.sh). */
Test(backend_choice, the_cpu_pins_host_memory_by_doing_nothing)
{
    eng_backend *cpu = eng_backend_open("cpu", &(eng_backend_options){.threads = 1}, NULL);
    cr_assert_null(eng_cpu_ops.pin_host);
    unsigned char area[4096];
    memset(area, 7, sizeof area);
    char *why = NULL;
    cr_expect(eng_pin_host(cpu, area, sizeof area, &why));
    cr_expect_null(why);
    eng_unpin_host(cpu, area);
    for (size_t i = 0; i < sizeof area; i++)
        cr_assert_eq(area[i], 7);
    eng_backend_close(cpu);
}

/* A backend's table must be whole: the first gap is named (and eng_backend_open refuses it). */
Test(backend_choice, a_backend_that_lacks_an_operation_is_named)
{
    cr_expect_null(eng_ops_missing(&eng_cpu_ops));
#ifdef HAVE_CUDA
    cr_expect_null(eng_ops_missing(&eng_cuda_ops));
#endif
    eng_ops partial = eng_cpu_ops;
    partial.sinkhorn = NULL;
    cr_expect_str_eq(eng_ops_missing(&partial), "sinkhorn");
    partial.open = NULL;
    cr_expect_str_eq(eng_ops_missing(&partial), "open", "the first gap in the table's order");
    partial = eng_cpu_ops;
    partial.adaptive_maxpool_backward = NULL;
    cr_expect_str_eq(eng_ops_missing(&partial), "adaptive_maxpool_backward", "the last one too");
}

Test(backend_choice, a_local_rank_past_the_gpus_is_refused)
{
    char *err = NULL;
    eng_backend_options o = {.device = 4096};
    cr_expect_null(eng_backend_open("cuda", &o, &err));
    cr_expect(err && (strstr(err, "GPU 4096 was asked for") || strstr(err, "no usable GPU") ||
                      strstr(err, "unknown backend")),
              "%s", err ? err : "(none)");
    free(err);
}

/* Where no GPU can run (this machine, CI), selfsup-train refuses MACHINE.DEVICE=gpu as a config
 * error: exit 2, the key named, the way back to the cpu given. */
Test(backend_choice, gpu_without_a_gpu_is_a_config_error, .timeout = 120)
{
    char *probe = NULL;
    eng_backend *be = eng_backend_open("cuda", NULL, &probe);
    free(probe);
    if (be) { /* a GPU machine: the refusal cannot happen here */
        eng_backend_close(be);
        return;
    }
    /* a config that reads no dataset, so nothing but the device can be refused */
    char *yaml = test_write_temp("gpu.yaml", "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n"
                                             "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4}}\n"
                                             "  MODEL: {TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}}\n");
    char *dir = test_make_tmpdir(), *train = test_build_path("selfsup-train"), *out = NULL;
    char *cmd = xasprintf("%s -c %s --in file:/dev/null --steps-per-epoch 1 config.MACHINE.DEVICE=gpu "
                          "config.CHECKPOINT.DIR=%s",
                          train, yaml, dir);
    int status = test_run(cmd, &out);
    cr_expect_eq(status, 2, "%s\n%s", cmd, out);
    cr_expect(strstr(out, "MACHINE.DEVICE") && strstr(out, "set MACHINE.DEVICE=cpu"), "%s", out);
    free(out), free(cmd), free(train);
    test_remove_temp(yaml);
    test_rm_rf(dir);
    free(dir);
}

#ifdef HAVE_CUDA
/* The cuda backend's algorithm cache: one entry per convolution, whatever way it is written. */
Test(backend_choice, conv_keys_name_the_convolution_not_its_spelling)
{
    eng_shape x = eng_shape4(8, 64, 56, 56), w = eng_shape4(64, 64, 3, 3);
    eng_conv_desc plain = {.pad = {1, 1}}, spelled = {.stride = {1, 1}, .pad = {1, 1}, .dilation = {1, 1}, .groups = 1};
    conv_key a = conv_key_of(&plain, &x, &w, true, ENG_FP32), b = conv_key_of(&spelled, &x, &w, true, ENG_FP32);
    cr_expect(conv_key_equal(&a, &b), "PyTorch's defaults written out are the same convolution");
    conv_key nondet = conv_key_of(&plain, &x, &w, false, ENG_FP32);
    cr_expect(!conv_key_equal(&a, &nondet), "a deterministic choice is not a free one");
    conv_key bf16 = conv_key_of(&plain, &x, &w, true, ENG_BF16);
    cr_expect(!conv_key_equal(&a, &bf16), "mixed precision's bf16 NHWC algorithms are other algorithms");
    eng_shape x2 = eng_shape4(16, 64, 56, 56), w2 = eng_shape4(64, 32, 3, 3);
    conv_key batch = conv_key_of(&plain, &x2, &w, true, ENG_FP32);
    cr_expect(!conv_key_equal(&a, &batch), "another batch size is another convolution");
    eng_conv_desc grouped = {.pad = {1, 1}, .groups = 2}, strided = {.stride = {2, 1}, .pad = {1, 1}};
    conv_key g = conv_key_of(&grouped, &x, &w2, true, ENG_FP32), s = conv_key_of(&strided, &x, &w, true, ENG_FP32);
    cr_expect(!conv_key_equal(&a, &g) && !conv_key_equal(&a, &s) && !conv_key_equal(&g, &s));
    eng_conv_desc padded = {.pad = {1, 0}}, dilated = {.pad = {1, 1}, .dilation = {2, 2}};
    conv_key pw = conv_key_of(&padded, &x, &w, true, ENG_FP32), dl = conv_key_of(&dilated, &x, &w, true, ENG_FP32);
    cr_expect(!conv_key_equal(&a, &pw) && !conv_key_equal(&a, &dl));
    eng_conv_desc same = {.pad = {1, 1}, .pad_extra = {1, 0}};
    conv_key sm = conv_key_of(&same, &x, &w, true, ENG_FP32);
    cr_expect(!conv_key_equal(&a, &sm), "extra zeros below make cuDNN see a taller input: another convolution");
}
#endif
