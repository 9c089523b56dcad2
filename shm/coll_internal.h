/*
 * coll_internal.h — what the two host worlds share: the shm world (collective.c) and the
 * network world (coll_net.c) describe a call in the same words and reduce in the same
 * arithmetic, so that one model trained across machines gets the very bits it gets on one.
 */
#ifndef SELFSUP_COLL_INTERNAL_H
#define SELFSUP_COLL_INTERNAL_H

#include "collective.h"

typedef enum { CALL_ALL_REDUCE = 1, CALL_ALL_GATHER, CALL_BROADCAST, CALL_BARRIER, CALL_JOIN } call_kind;

/* One collective call as every rank must make it. */
typedef struct {
    uint32_t kind, dtype;
    int32_t arg; /* all-reduce: the op; broadcast: the root */
    uint64_t count, number;
} call_desc;

const char *coll_call_name(uint32_t kind);
/* "all_reduce of 12 fp32 (call 2)", "broadcast of 3 bf16 from rank 1 (call 4)", … */
void coll_describe_call(const call_desc *d, char *out, size_t n);
bool coll_same_call(const call_desc *a, const call_desc *b);

/* out = src[0] op src[1] op … op src[world - 1], combined left to right in fp32 (bf16: widened,
 * combined, rounded once; fp64 in double), MEAN dividing the sum by world. out may be src[0],
 * no other source. */
void coll_reduce_in_rank_order(void *out, const void *const *src, int world, size_t n, coll_dtype dtype,
                               coll_op op);

#endif
