// Uniform neighbor sampling on a CSR for a batch of seeds, one warp per seed (the paths are
// described in sample.cuh).
#include "sample.cuh"

// Per seed, a thread each: its degree and how many edges it samples (the host's exclusive scan
// of `counts` is sample_uniform's `offsets`). One launch instead of five array operations,
// which dominate small batches. Rows outside [0, num_rows) count 0: the host refuses them.
extern "C" __global__ void sample_count(const long long* __restrict__ indptr, const long long* __restrict__ rows,
                                        long long n, long long num_rows, long long fanout, int replace,
                                        long long* __restrict__ deg_out, long long* __restrict__ counts) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const long long row = rows[i];
    const long long deg = row >= 0 && row < num_rows ? indptr[row + 1] - indptr[row] : 0;
    deg_out[i] = deg;
    if (fanout < 0) {
      counts[i] = deg;
    } else if (replace) {
      counts[i] = deg > 0 ? fanout : 0;
    } else {
      counts[i] = deg < fanout ? deg : fanout;
    }
  }
}

extern "C" __global__ void sample_uniform(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                          const long long* __restrict__ edge_ids, const long long* __restrict__ rows,
                                          long long n, const long long* __restrict__ offsets, long long fanout,
                                          int replace, unsigned long long seed, int small, long long* __restrict__ src,
                                          long long* __restrict__ eid, int* __restrict__ tmp_local) {
  GfSampleOut o;
  o.indices = indices;
  o.edge_ids = edge_ids;
  o.ts = nullptr;
  o.src = src;
  o.eid = eid;
  o.ts_out = nullptr;
  o.tmp_local = tmp_local;
  o.small = small;
  const int lane = gf_lane();
  const long long step = gf_num_warps();
  for (long long i = gf_warp_id(); i < n; i += step) {
    const long long row = rows[i];
    const long long begin = indptr[row];
    const long long deg = indptr[row + 1] - begin;
    const long long off = offsets[i];
    if (offsets[i + 1] == off) continue;  // nothing to sample: the whole warp skips together
    if (fanout < 0 || (!replace && deg <= fanout)) {
      for (long long j = lane; j < deg; j += GF_WARP) gf_emit(o, off + j, begin, j);
    } else if (replace) {
      gf_with_replacement(o, seed, i, off, begin, deg, fanout, lane);
    } else if (small) {
      gf_floyd(o, seed, i, off, begin, deg, (int)fanout, lane);
    } else {
      gf_reservoir(o, seed, i, off, deg, fanout, lane);
    }
  }
}
