// Temporal neighbor sampling on a time-sorted CSR (ascending ts within a row) for a batch of
// (row, time) roots: root i sees the n_i edges of its row with ts < times[i] (strictly before),
// i.e. row positions [0, n_i). Two kernels:
//
//   temporal_count: n_i by a binary search, one thread per root (log2(deg) dependent loads; a
//     warp per root would leave 31 lanes idle). The host scans the counts into offsets:
//     c_i = n_i for fanout -1, else min(n_i, k).
//   temporal_sample: one warp per root. "recent" (or c_i == n_i) copies positions
//     [n_i - c_i, n_i) in order; "uniform" is sample.cu's without-replacement sampling of a row
//     of degree n_i, drawn at batch position first_position + i: Floyd in registers for
//     k <= 64, the parallel reservoir above (unsorted local positions in tmp_local, sorted on
//     the host). reference.sample_temporal reproduces every output bit for bit.
#include "sample.cuh"

extern "C" __global__ void temporal_count(const long long* __restrict__ indptr, const long long* __restrict__ ts,
                                          const long long* __restrict__ rows, const long long* __restrict__ times,
                                          long long n, long long* __restrict__ before) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const long long row = rows[i];
    const long long begin = indptr[row];
    const long long t = times[i];
    long long lo = begin, hi = indptr[row + 1];
    while (lo < hi) {  // first position whose ts is >= t
      const long long mid = lo + ((hi - lo) >> 1);
      if (ts[mid] < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    before[i] = lo - begin;
  }
}

extern "C" __global__ void temporal_sample(const long long* __restrict__ indptr, const long long* __restrict__ nbr,
                                           const long long* __restrict__ ts, const long long* __restrict__ eid,
                                           const long long* __restrict__ rows, const long long* __restrict__ before,
                                           long long n, const long long* __restrict__ offsets, long long fanout,
                                           int recent, unsigned long long seed, long long first_position, int small,
                                           long long* __restrict__ nbr_out, long long* __restrict__ ts_out,
                                           long long* __restrict__ eid_out, int* __restrict__ tmp_local) {
  GfSampleOut o;
  o.indices = nbr;
  o.edge_ids = eid;
  o.ts = ts;
  o.src = nbr_out;
  o.eid = eid_out;
  o.ts_out = ts_out;
  o.tmp_local = tmp_local;
  o.small = small;
  const int lane = gf_lane();
  const long long step = gf_num_warps();
  for (long long i = gf_warp_id(); i < n; i += step) {
    const long long off = offsets[i];
    const long long count = offsets[i + 1] - off;
    if (count == 0) continue;  // the whole warp skips together
    const long long begin = indptr[rows[i]];
    const long long nb = before[i];
    if (recent || count == nb) {
      for (long long j = lane; j < count; j += GF_WARP) gf_emit(o, off + j, begin, nb - count + j);
    } else if (small) {
      gf_floyd(o, seed, first_position + i, off, begin, nb, (int)fanout, lane);
    } else {
      gf_reservoir(o, seed, first_position + i, off, nb, fanout, lane);
    }
  }
}
