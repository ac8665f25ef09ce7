// kernels/cuda/mmq/mmq_layout.h — MMQ tile geometry and the output ownership map (DS4_HD, so
// tests/gpu/test_cuda_host_helpers.cpp checks on the host that every output of a tile has exactly
// one owning thread).
//
// A 128-thread block computes a 64-row x 16-column tile. Warp w owns rows 16w..16w+15, split in
// two 8-row MMA tiles (rt), and the columns in two 8-column MMA tiles (ct). In an
// m8n8k16 int8 MMA the accumulator fragment of lane l is (row l/4, columns 2*(l%4) + {0,1})
// (PTX ISA, "Matrix Fragments for mma.m8n8k16"), so lane l owns 8 outputs o = (rt*2 + ct)*2 + e.
#pragma once

#include "kernels/quant/scalar_formats.h"

namespace ds4::cuda {

inline constexpr int kMmqRows = 64;         ///< weight rows per block tile
inline constexpr int kMmqCols = 16;         ///< token columns per block tile (= kMmqTileCols)
inline constexpr int kMmqThreads = 128;     ///< 4 warps
inline constexpr int kMmqOutPerThread = 8;  ///< outputs owned by one thread

/// Tile-local row of output o of (warp, lane).
DS4_HD inline int mmq_out_row(int warp, int lane, int o) { return 16 * warp + 8 * (o / 4) + lane / 4; }
/// Tile-local column of output o of lane.
DS4_HD inline int mmq_out_col(int lane, int o) { return 8 * ((o / 2) % 2) + 2 * (lane % 4) + o % 2; }

}  // namespace ds4::cuda
