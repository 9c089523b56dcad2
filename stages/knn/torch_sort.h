/*
 * torch_sort.h — the order torch 1.13's CPU `values.sort(dim, descending=True)` gives, ties
 * included, so that kNN predictions match VISSL's when class scores are equal.
 *
 * torch sorts (value, index) pairs with std::sort (not stable) and the comparator "a before b
 * when a is NaN and b is not, or a > b". libstdc++'s std::sort is an introsort: median-of-three
 * quicksort down to runs of 16, a heapsort when the recursion gets 2·log2(n) deep, and a final
 * insertion sort. Equal values therefore come out in an order that depends on the algorithm's
 * exact steps (sorting [0, 0, …, 0] with 17 or more entries scrambles the indices), and the
 * only way to reproduce it is to run the same steps, which torch_sort_desc does. Up to 16
 * entries it is an insertion sort, i.e. stable.
 */
#ifndef SELFSUP_KNN_TORCH_SORT_H
#define SELFSUP_KNN_TORCH_SORT_H

#include <stddef.h>
#include <stdint.h>

/* Sort values[0..n) descending in place, carrying idx[] along, exactly as torch 1.13's CPU
 * sort(descending=True) orders them (libstdc++ std::sort). Callers fill idx with 0..n-1. */
void torch_sort_desc(float *values, int64_t *idx, size_t n);

#endif
