// Uniform neighbor sampling, one warp per seed: the device helpers shared by sample.cu (a CSR
// row) and temporal.cu (the edges of a row before a time, i.e. a row of degree n_i).
//
// Same contract as graphfeed.graph_store.sampling.sample_csr: seed i's edges go to
// [offsets[i], offsets[i+1]) (the host computes offsets as an exclusive scan of the counts:
// deg for fanout -1, min(deg, k) without replacement, k or 0 with replacement) and, within a
// seed, in ascending CSR position. Every random draw is gf_rand(seed, i, j) for the seed's
// batch position i (repeated rows are sampled independently) and a per-algorithm counter j, so
// the output is a pure function of the inputs; reference.sample_csr reproduces it bit for bit.
//
// Paths (k = fanout):
//   take all (k == -1, or deg <= k without replacement): positions 0..deg-1 in order.
//   k <= GF_SMALL_K (64), "small": the k picks live in registers (lane l holds picks l and
//     l+32); without replacement Floyd's algorithm (draw j <- bounded(rand(s), deg-k+s+1) for
//     s = 0..k-1, keep it unless already picked, else take deg-k+s: a uniform k-subset), with
//     replacement k independent draws bounded(rand(j), deg). The warp then sorts the picks by
//     rank (counting smaller values over warp shuffles, ties by index) and writes src/eid.
//   k > GF_SMALL_K, "large" (small == 0): without replacement a parallel reservoir (Algorithm R
//     with atomicMax: slot r ends up holding the largest idx in [k, deg) whose draw
//     bounded(rand(idx), idx+1) hit r, else r itself, exactly what the sequential algorithm
//     keeps, independently of the order the lanes run in); with replacement the k draws. Local
//     positions go, unsorted, to tmp_local; the host sorts (segment, position) keys and
//     gathers src/eid (kernels.py).
#ifndef GRAPHFEED_SAMPLE_CUH
#define GRAPHFEED_SAMPLE_CUH

#include "common.cuh"

#define GF_SMALL_K 64

struct GfSampleOut {
  const long long* indices;
  const long long* edge_ids;
  const long long* ts;  // temporal sampling only (else null): copied to ts_out like edge_ids
  long long* src;
  long long* eid;
  long long* ts_out;
  int* tmp_local;  // large mode only
  int small;
};

__device__ __forceinline__ void gf_emit(const GfSampleOut& o, long long slot, long long begin, long long local) {
  if (o.small) {
    const long long pos = begin + local;
    o.src[slot] = o.indices[pos];
    o.eid[slot] = o.edge_ids[pos];
    if (o.ts_out) o.ts_out[slot] = o.ts[pos];
  } else {
    o.tmp_local[slot] = (int)local;
  }
}

// Writes the k (<= 64) picks held as (a: pick lane, b: pick lane+32) in ascending order; equal
// values (with replacement) are ordered by pick index, so the ranks are a permutation.
__device__ __forceinline__ void gf_sort_emit(const GfSampleOut& o, long long off, long long begin, int k,
                                             long long a, long long b, int lane) {
  int rank_a = 0, rank_b = 0;
  const int pa = lane, pb = lane + GF_WARP;
  const int k1 = k < GF_WARP ? k : GF_WARP;
  for (int q = 0; q < k1; ++q) {
    const long long v = __shfl_sync(GF_FULL_MASK, a, q);
    rank_a += (v < a) || (v == a && q < pa);
    rank_b += (v < b) || (v == b && q < pb);
  }
  for (int q = GF_WARP; q < k; ++q) {
    const long long v = __shfl_sync(GF_FULL_MASK, b, q - GF_WARP);
    rank_a += (v < a) || (v == a && q < pa);
    rank_b += (v < b) || (v == b && q < pb);
  }
  if (pa < k) gf_emit(o, off + rank_a, begin, a);
  if (pb < k) gf_emit(o, off + rank_b, begin, b);
}

__device__ __forceinline__ void gf_floyd(const GfSampleOut& o, unsigned long long seed, long long i, long long off,
                                         long long begin, long long deg, int k, int lane) {
  long long a = -1, b = -1;  // picks lane and lane+32; -1 never equals a draw
  for (int s = 0; s < k; ++s) {
    const long long j = deg - k + s;
    const long long t = gf_bounded(gf_rand(seed, i, s), j + 1);
    const int taken = __any_sync(GF_FULL_MASK, a == t || b == t);
    const long long v = taken ? j : t;
    if (s == lane) a = v;
    if (s == lane + GF_WARP) b = v;
  }
  gf_sort_emit(o, off, begin, k, a, b, lane);
}

__device__ __forceinline__ void gf_with_replacement(const GfSampleOut& o, unsigned long long seed, long long i,
                                                    long long off, long long begin, long long deg, long long k,
                                                    int lane) {
  if (o.small) {
    const long long a = lane < k ? gf_bounded(gf_rand(seed, i, lane), deg) : -1;
    const long long b = lane + GF_WARP < k ? gf_bounded(gf_rand(seed, i, lane + GF_WARP), deg) : -1;
    gf_sort_emit(o, off, begin, (int)k, a, b, lane);
  } else {
    for (long long j = lane; j < k; j += GF_WARP) o.tmp_local[off + j] = (int)gf_bounded(gf_rand(seed, i, j), deg);
  }
}

__device__ __forceinline__ void gf_reservoir(const GfSampleOut& o, unsigned long long seed, long long i, long long off,
                                             long long deg, long long k, int lane) {
  for (long long r = lane; r < k; r += GF_WARP) o.tmp_local[off + r] = (int)r;
  __syncwarp(GF_FULL_MASK);
  for (long long idx = k + lane; idx < deg; idx += GF_WARP) {
    const long long r = gf_bounded(gf_rand(seed, i, idx), idx + 1);
    if (r < k) atomicMax(o.tmp_local + off + r, (int)idx);
  }
}

#endif  // GRAPHFEED_SAMPLE_CUH
