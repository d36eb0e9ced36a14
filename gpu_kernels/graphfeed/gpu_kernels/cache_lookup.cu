// Cache lookup + gather, one warp per requested id:
//   gpu_slot[id] >= 0          -> copy gpu_rows[gpu_slot[id]]            where[r] = 0 (GPU hit)
//   else host_rows != NULL and
//     (host_slot == NULL ? id : host_slot[id]) >= 0
//                              -> copy that row of host_rows (zero-copy)  where[r] = 1 (host hit)
//   else                       -> zero row                               where[r] = -1 (miss)
//
// gpu_slot is a direct-mapped int32 table over all node ids, resident in device memory: one
// dependent 4-byte load per id (all lanes read the same address: one broadcast transaction)
// and no probing, which beats any hash table while 4 * num_nodes bytes fit (400 MB for 100M
// nodes). host_rows/host_slot may be pinned, mapped host memory (the loader's host tier) or a
// full feature table in pinned memory (host_slot == NULL: row = id). Misses are reported in
// `where`; the host compacts their positions and fetches them from the graph-stores.
// `order` (may be NULL) is the order in which warps take the ids, as in gather.cu.
#include "common.cuh"

template <typename V>
__device__ __forceinline__ void gf_cache_gather(const long long* __restrict__ ids, const long long* __restrict__ order,
                                                long long n, long long units,
                                                const int* __restrict__ gpu_slot, const V* __restrict__ gpu_rows,
                                                const int* __restrict__ host_slot, const V* __restrict__ host_rows,
                                                V* __restrict__ out, signed char* __restrict__ where) {
  const int lane = gf_lane();
  const long long step = gf_num_warps();
  for (long long i = gf_warp_id(); i < n; i += step) {
    const long long r = order != 0 ? order[i] : i;
    const long long id = ids[r];
    const int s = gpu_slot[id];
    const V* src = 0;
    signed char w = -1;
    if (s >= 0) {
      src = gpu_rows + (long long)s * units;
      w = 0;
    } else if (host_rows != 0) {
      const long long h = host_slot != 0 ? (long long)host_slot[id] : id;
      if (h >= 0) {
        src = host_rows + h * units;
        w = 1;
      }
    }
    if (src != 0) {
      gf_copy_row(src, out + r * units, units, lane);
    } else {
      gf_zero_row(out + r * units, units, lane);
    }
    if (lane == 0) where[r] = w;
  }
}

#define GF_CACHE_GATHER(NAME, V)                                                                  \
  extern "C" __global__ void NAME(const long long* __restrict__ ids, const long long* __restrict__ order, \
                                  long long n, long long units,                                   \
                                  const int* __restrict__ gpu_slot, const V* __restrict__ gpu_rows, \
                                  const int* __restrict__ host_slot, const V* __restrict__ host_rows, \
                                  V* __restrict__ out, signed char* __restrict__ where) {          \
    gf_cache_gather<V>(ids, order, n, units, gpu_slot, gpu_rows, host_slot, host_rows, out, where);      \
  }

GF_CACHE_GATHER(cache_gather_u16, uint4)
GF_CACHE_GATHER(cache_gather_u8, uint2)
GF_CACHE_GATHER(cache_gather_u4, unsigned int)
GF_CACHE_GATHER(cache_gather_u2, unsigned short)
GF_CACHE_GATHER(cache_gather_u1, unsigned char)
