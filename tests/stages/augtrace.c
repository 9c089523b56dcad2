/*
 * selfsup-test-augtrace — run a transform list on one image and write what came out and
 * every random decision taken, for tests/golden/make_augment_fixtures.py.
 *
 *   selfsup-test-augtrace IMAGE.npy TRANSFORMS.yaml SEED EPOCH INDEX OUTDIR
 *
 * IMAGE.npy is uint8 [H, W, 3]; TRANSFORMS.yaml holds the list under the key `t`. Writes
 * OUTDIR/trace.txt (aug_apply_traced's lines), OUTDIR/out.K.npy per item (uint8 [H, W, 3], or
 * [T, H, W, 3] for patches) and OUTDIR/label.npy (int64). The generator replays the trace with
 * torchvision and PIL; the unit test re-runs the list and compares with both.
 */
#include "augment/transforms.h"
#include "config.h"
#include "log.h"
#include "npy.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(EXIT_RUNTIME, "cannot open %s", path);
    strbuf sb = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sb_putn(&sb, buf, n);
    fclose(f);
    return sb.s ? sb.s : xstrdup("");
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: selfsup-test-augtrace IMAGE.npy TRANSFORMS.yaml SEED EPOCH INDEX OUTDIR\n");
        return 2;
    }
    npy_array a = {0};
    char *why = NULL;
    if (npy_read(argv[1], &a, &why) != 0 || a.dtype != NPY_U1 || a.ndim != 3 || a.shape[2] != 3)
        die(EXIT_USAGE, "%s: need a uint8 [H, W, 3] array (%s)", argv[1], why ? why : "wrong shape");
    char *yaml = read_text(argv[2]);
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(yaml, strlen(yaml), argv[2], &err);
    aug_pipeline *p = root ? aug_pipeline_build(cfg_map_get(root, "t"), "t", &err) : NULL;
    if (!p)
        die(EXIT_USAGE, "%s", err.msg);
    img_u8 im = img_alloc((int)a.shape[1], (int)a.shape[0], 3);
    memcpy(im.px, a.data, a.nbytes);
    int64_t label = 0, valid = 1, idx = strtoll(argv[5], NULL, 10);
    aug_sample s = {0};
    aug_sample_init(&s, &im, 1, &label, 1, &valid, &idx);
    strbuf trace = {0};
    char msg[256];
    if (aug_apply_traced(p, &s, strtoull(argv[3], NULL, 10), (uint32_t)strtoul(argv[4], NULL, 10), (uint64_t)idx,
                         &trace, msg, sizeof msg) != 0)
        die(EXIT_RUNTIME, "aug_apply: %s", msg);
    char *path = xasprintf("%s/trace.txt", argv[6]);
    FILE *f = fopen(path, "w");
    if (!f || fputs(sb_str(&trace), f) < 0 || fclose(f) != 0)
        die(EXIT_RUNTIME, "cannot write %s", path);
    free(path);
    for (int k = 0; k < s.n; k++) {
        const aug_item *it = &s.items[k];
        size_t shape[4] = {(size_t)it->towers, (size_t)(it->im.h / it->towers), (size_t)it->im.w, 3};
        bool stack = it->towers > 1;
        path = xasprintf("%s/out.%d.npy", argv[6], k);
        if (npy_write(path, NPY_U1, stack ? 4 : 3, stack ? shape : shape + 1, it->im.px, &why) != 0)
            die(EXIT_RUNTIME, "%s", why);
        free(path);
    }
    path = xasprintf("%s/label.npy", argv[6]);
    size_t nl = (size_t)s.n_label;
    if (npy_write(path, NPY_I8, 1, &nl, s.label, &why) != 0)
        die(EXIT_RUNTIME, "%s", why);
    free(path);
    sb_free(&trace);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    cfg_free(root);
    free(yaml);
    npy_close(&a);
    return 0;
}
