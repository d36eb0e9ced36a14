// The kernels of gpu_kernels/graphfeed/gpu_kernels/*.cu compiled for the CPU (see cuda_shim.h); emulator.py builds
// this into a shared library and launches emu_<kernel>(grid, block, args).
#include "cuda_shim.h"

#include "gather.cu"
#include "cache_lookup.cu"
#include "sample.cu"
#include "temporal.cu"

GF_EMU_EXPORT(gather_rows_u16)
GF_EMU_EXPORT(gather_rows_u8)
GF_EMU_EXPORT(gather_rows_u4)
GF_EMU_EXPORT(gather_rows_u2)
GF_EMU_EXPORT(gather_rows_u1)
GF_EMU_EXPORT(cache_gather_u16)
GF_EMU_EXPORT(cache_gather_u8)
GF_EMU_EXPORT(cache_gather_u4)
GF_EMU_EXPORT(cache_gather_u2)
GF_EMU_EXPORT(cache_gather_u1)
GF_EMU_EXPORT(sample_count)
GF_EMU_EXPORT(sample_uniform)
GF_EMU_EXPORT(temporal_count)
GF_EMU_EXPORT(temporal_sample)
