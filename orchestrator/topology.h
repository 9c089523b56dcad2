/*
 * topology.h — which processes a run needs and how the rings connect them, from the config.
 *
 *   train:            decode → ring "decoded" → augment × W → ring "augmented" → collate
 *                     → ring "batches" → train × P
 *                     and with TEST_MODEL the same chain for DATA.TEST (rings "test_decoded",
 *                     "test_augmented", "test_batches"), read by the trainers' --test-in;
 *                     TEST_ONLY: the one chain is DATA.TEST's
 *   extract_features: the same with extract × P in place of train
 *
 * W is DATA.NUM_DATALOADER_WORKERS (at least 1); P is DISTRIBUTED.NUM_PROC_PER_NODE, the
 * trainers of this node, ranked node_rank·P + i of NUM_NODES·P. With P > 1 each trainer has
 * chains of its own (rings r<i>_decoded, …, r<i>_test_batches), their decode stages reading
 * rank i's shard, and the trainers meet in one collectives segment (--coll); extractors share
 * one chain. Each ring knows how many
 * producers it has, so that its end of stream comes only when all of them have finished.
 * Stage commands are selfsup-NAME beside the selfsup binary unless SELFSUP.STAGES names
 * another command line for NAME (the tests put their own small stages there).
 *
 * The decode farm splits the train chain between hosts (`selfsup run --role`, SELFSUP.FARM):
 *
 *   farm:   decode --lease → ring "decoded" → augment × FARM.WORKERS → tcp://TRAINER_HOST:DATA_PORT?open
 *   train:  tcp://BIND_ADDRESS:DATA_PORT?open → collate --lease-serve …:LEASE_PORT → ring "batches"
 *           → train, and the test and memory chains as above, on this host
 *
 * A farm host's decode asks the trainer host's collate for leases of sampler positions
 * (collate/farm_server.h); "all", the default, is the one-machine run. With several trainers
 * (NUM_NODES × NUM_PROC_PER_NODE) each rank r has a collate of its own on its node, at
 * DATA_PORT + 2r and LEASE_PORT + 2r ("r<i>_batches" for the node's trainer i), and every farm
 * host a chain for each rank, reading the rank's shard, sending to the rank's node (the
 * node-th address of TRAINER_HOST).
 */
#ifndef SELFSUP_TOPOLOGY_H
#define SELFSUP_TOPOLOGY_H

#include "config.h"
#include "ring.h"

typedef struct {
    char *label;        /* "decoded" */
    char *name;         /* the shm name: selfsup.<pid>.<label> */
    ring_geometry geo;
} topo_ring;

typedef struct {
    char *name;         /* stage name: "augment" */
    char *id;           /* control-plane id: "augment.2" */
    char **argv;        /* NULL-terminated, ready for execv */
    int in_ring, out_ring; /* indexes into topology.rings, -1 for none */
    const char *split;  /* a data chain's stage: "train" or "test"; NULL for the trainers */
} topo_stage;

typedef struct {
    const char *engine;
    topo_ring *rings;
    int n_rings;
    topo_stage *stages;
    int n_stages;
} topology;

typedef enum { TOPO_ALL, TOPO_FARM, TOPO_TRAIN } topo_role;

typedef struct {
    const char *config_file;  /* passed on to every stage with the overrides */
    char *const *overrides;
    int n_overrides;
    int node_rank;
    const char *bin_dir;      /* where selfsup-NAME binaries are (the selfsup binary's dir) */
    long resume_epoch;        /* training resumes here (CHECKPOINT.AUTO_RESUME): the decode */
    long resume_batch;        /* stage starts at this epoch and batch; 0, 0 from the start */
    long resume_tests_from;   /* the test phases after this epoch and later are still to run */
    topo_role role;           /* what this host runs of a decode farm run (--role) */
} topo_options;

/* Build the topology. Returns false with err filled (a stage command that does not exist,
 * an engine we cannot run yet). */
bool topology_build(topology *t, const cfg_node *config, const char *engine, const topo_options *opt,
                    cfg_err *err);
/* Tell every stage where the control socket is (known once it is bound). */
void topology_set_control(topology *t, const char *endpoint);
void topology_free(topology *t);

/* Bytes of one slot of the ring labelled `ring_label` ("decoded", "augmented", "batches"): SELFSUP.RING.SLOT_BYTES,
 * else 32 MiB for decoded images and, for crops and batches, what DATA.TRAIN's transforms,
 * sources and batch size make (a generous bound when a size depends on the image). */
size_t topology_slot_bytes(const cfg_node *config, const char *ring_label);

#endif
