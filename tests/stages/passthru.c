/*
 * selfsup-test-passthru — a worker for the tests: forwards every record unchanged, like an
 * augment worker that does nothing, and can misbehave on purpose.
 */
#include "stage.h"
#include "test_stage.h"

#include <signal.h>
#include <stdio.h>

static int option(void *state, int argc, char **argv)
{
    return test_misbehave_option(state, argc, argv);
}

/* --peers-lost-after: the hook's verdict once that many records went through. */
static int lose_peers(void *arg)
{
    test_misbehave *bad = arg;
    if (bad->records < bad->peers_lost_after)
        return STAGE_HOOK_GO_ON;
    fprintf(stderr, "test-passthru: the peers it serves are gone after %ld records (on purpose)\n", bad->records);
    return STAGE_HOOK_PEERS_LOST;
}

static int run(stage *s, void *state)
{
    test_misbehave *bad = state;
    rec_view v;
    int st;
    if (bad->peers_lost_after)
        stage_set_poll_hook(s, lose_peers, bad);
    for (long i = 0; (st = stage_read(s, &v)) == STAGE_RECORD; i++, bad->records = i) {
        if (bad->fail_after && i == bad->fail_after) {
            fprintf(stderr, "test-passthru: failing on purpose after %ld records\n", i);
            return 1;
        }
        if (bad->crash_after && i == bad->crash_after)
            raise(SIGKILL); /* holding the input slot, as a worker killed mid-record would */
        int rc = stage_forward(s, &v);
        stage_read_done(s);
        if (rc != 0)
            return 1;
        if (stage_stopping(s))
            break;
        if (bad->sleep_us)
            usleep((useconds_t)bad->sleep_us);
    }
    return st == STAGE_FAILED ? 1 : stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "test-passthru",
        .summary = "Forward records unchanged (a test stage).",
        .role = "worker",
        .reads = true,
        .writes = true,
        .option = option,
        .options = "  --sleep-us N, --fail-after N, --crash-after N, --peers-lost-after N   misbehave on purpose\n",
    };
    test_misbehave bad = {0};
    return stage_main(argc, argv, &info, &bad, run);
}
