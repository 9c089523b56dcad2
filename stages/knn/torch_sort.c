/*
 * torch_sort.c — libstdc++'s std::sort, step for step, on (value, index) pairs with torch's
 * descending comparator (see torch_sort.h for why). The function names follow libstdc++'s
 * (bits/stl_algo.h, bits/stl_heap.h) so the two can be read side by side; positions are
 * indices into the arrays instead of iterators.
 */
#include "knn/torch_sort.h"

#include <math.h>
#include <stdbool.h>

enum { SORT_THRESHOLD = 16 }; /* libstdc++'s _S_threshold */

typedef struct {
    float *v;
    int64_t *i;
} pairs;

typedef struct {
    float v;
    int64_t i;
} pair;

/* torch's KeyValueCompDesc: a goes before b. */
static bool before(float a, float b)
{
    return (isnan(a) && !isnan(b)) || a > b;
}

static bool comp_at(pairs p, size_t a, size_t b)
{
    return before(p.v[a], p.v[b]);
}

static void swap_at(pairs p, size_t a, size_t b)
{
    float v = p.v[a];
    p.v[a] = p.v[b];
    p.v[b] = v;
    int64_t i = p.i[a];
    p.i[a] = p.i[b];
    p.i[b] = i;
}

static pair get(pairs p, size_t a)
{
    return (pair){p.v[a], p.i[a]};
}

static void put(pairs p, size_t a, pair x)
{
    p.v[a] = x.v;
    p.i[a] = x.i;
}

static void move_at(pairs p, size_t to, size_t from)
{
    p.v[to] = p.v[from];
    p.i[to] = p.i[from];
}

/* ---- heapsort, the introsort's fallback (std::__partial_sort(first, last, last)) -------- */

static void push_heap(pairs p, size_t first, size_t hole, size_t top, pair value)
{
    size_t parent = (hole - 1) / 2;
    while (hole > top && before(p.v[first + parent], value.v)) {
        move_at(p, first + hole, first + parent);
        hole = parent;
        parent = (hole - 1) / 2;
    }
    put(p, first + hole, value);
}

static void adjust_heap(pairs p, size_t first, size_t hole, size_t len, pair value)
{
    size_t top = hole, child = hole;
    while (len > 0 && child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (comp_at(p, first + child, first + child - 1))
            child--;
        move_at(p, first + hole, first + child);
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        move_at(p, first + hole, first + child - 1);
        hole = child - 1;
    }
    push_heap(p, first, hole, top, value);
}

static void make_heap(pairs p, size_t first, size_t last)
{
    size_t len = last - first;
    if (len < 2)
        return;
    for (size_t parent = (len - 2) / 2;; parent--) {
        adjust_heap(p, first, parent, len, get(p, first + parent));
        if (parent == 0)
            return;
    }
}

static void heap_sort(pairs p, size_t first, size_t last)
{
    make_heap(p, first, last);
    while (last - first > 1) {
        --last;
        pair value = get(p, last);
        move_at(p, last, first);
        adjust_heap(p, first, 0, last - first, value);
    }
}

/* ---- quicksort steps ---------------------------------------------------------------------- */

static void move_median_to_first(pairs p, size_t result, size_t a, size_t b, size_t c)
{
    if (comp_at(p, a, b)) {
        if (comp_at(p, b, c))
            swap_at(p, result, b);
        else if (comp_at(p, a, c))
            swap_at(p, result, c);
        else
            swap_at(p, result, a);
    } else if (comp_at(p, a, c)) {
        swap_at(p, result, a);
    } else if (comp_at(p, b, c)) {
        swap_at(p, result, c);
    } else {
        swap_at(p, result, b);
    }
}

static size_t unguarded_partition(pairs p, size_t first, size_t last, size_t pivot)
{
    for (;;) {
        while (comp_at(p, first, pivot))
            ++first;
        --last;
        while (comp_at(p, pivot, last))
            --last;
        if (!(first < last))
            return first;
        swap_at(p, first, last);
        ++first;
    }
}

static size_t unguarded_partition_pivot(pairs p, size_t first, size_t last)
{
    size_t mid = first + (last - first) / 2;
    move_median_to_first(p, first, first + 1, mid, last - 1);
    return unguarded_partition(p, first + 1, last, first);
}

static void introsort_loop(pairs p, size_t first, size_t last, int depth_limit)
{
    while (last - first > SORT_THRESHOLD) {
        if (depth_limit == 0) {
            heap_sort(p, first, last);
            return;
        }
        --depth_limit;
        size_t cut = unguarded_partition_pivot(p, first, last);
        introsort_loop(p, cut, last, depth_limit);
        last = cut;
    }
}

/* ---- the final insertion sort ------------------------------------------------------------- */

static void unguarded_linear_insert(pairs p, size_t last)
{
    pair value = get(p, last);
    size_t next = last - 1;
    while (before(value.v, p.v[next])) {
        move_at(p, last, next);
        last = next;
        --next;
    }
    put(p, last, value);
}

static void insertion_sort(pairs p, size_t first, size_t last)
{
    if (first == last)
        return;
    for (size_t i = first + 1; i != last; ++i) {
        if (comp_at(p, i, first)) {
            pair value = get(p, i);
            for (size_t j = i; j > first; j--)
                move_at(p, j, j - 1);
            put(p, first, value);
        } else {
            unguarded_linear_insert(p, i);
        }
    }
}

static void final_insertion_sort(pairs p, size_t first, size_t last)
{
    if (last - first > SORT_THRESHOLD) {
        insertion_sort(p, first, first + SORT_THRESHOLD);
        for (size_t i = first + SORT_THRESHOLD; i != last; ++i)
            unguarded_linear_insert(p, i);
    } else {
        insertion_sort(p, first, last);
    }
}

/* std::__lg: floor(log2(n)) for n > 0. */
static int floor_log2(size_t n)
{
    int lg = 0;
    while (n >>= 1)
        lg++;
    return lg;
}

void torch_sort_desc(float *values, int64_t *idx, size_t n)
{
    if (n < 2)
        return;
    pairs p = {values, idx};
    introsort_loop(p, 0, n, 2 * floor_log2(n));
    final_insertion_sort(p, 0, n);
}
