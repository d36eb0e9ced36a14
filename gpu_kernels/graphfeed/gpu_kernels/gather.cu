// Zero-copy row gather: out[r] = table[ids[r]] for every r, one warp per row.
//
// `table` may live in device memory or in pinned host memory mapped into the device's address
// space (cudaHostAlloc(..., cudaHostAllocMapped); with unified virtual addressing the host
// pointer is the device pointer). In the second case each warp's loads travel over PCIe/NVLink
// as they are issued: no staging copy, no CPU gather. Throughput then depends on having many
// row reads in flight, which the host side ensures by launching enough warps to fill the GPU.
//
// The kernels move opaque units of 16/8/4/2/1 bytes; the host picks the widest unit that
// divides the row pitch and both base pointers, so any dtype (float32, float16, ...) and any
// row width work, and 128-dim float32 rows (512 B) move as one 16-byte load per lane.
//
// `order` (may be NULL: identity) is the order in which warps take the rows: the i-th row a
// warp takes is order[i]; each row still lands at out[r]. Over the bus, reads in ascending id
// order ran 1.5-2.7x faster than random ones on an H100 once the table outgrew what the
// address translation covers (5 GB: random pages miss it; huge pages did not help), so the
// host passes argsort(ids) for large batches from large host tables (kernels.py).
#include "common.cuh"

template <typename V>
__device__ __forceinline__ void gf_gather(const V* __restrict__ table, const long long* __restrict__ ids,
                                          const long long* __restrict__ order, long long n, long long units,
                                          V* __restrict__ out) {
  const int lane = gf_lane();
  const long long step = gf_num_warps();
  for (long long i = gf_warp_id(); i < n; i += step) {
    const long long r = order != 0 ? order[i] : i;
    gf_copy_row(table + ids[r] * units, out + r * units, units, lane);
  }
}

#define GF_GATHER(NAME, V)                                                                      \
  extern "C" __global__ void NAME(const V* __restrict__ table, const long long* __restrict__ ids, \
                                  const long long* __restrict__ order, long long n, long long units, \
                                  V* __restrict__ out) {                                        \
    gf_gather<V>(table, ids, order, n, units, out);                                            \
  }

GF_GATHER(gather_rows_u16, uint4)
GF_GATHER(gather_rows_u8, uint2)
GF_GATHER(gather_rows_u4, unsigned int)
GF_GATHER(gather_rows_u2, unsigned short)
GF_GATHER(gather_rows_u1, unsigned char)
