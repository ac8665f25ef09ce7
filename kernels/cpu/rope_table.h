// kernels/cpu/rope_table.h — the rope op's rotations from a table: cos/sin of float(pos) * freqs[i]
// computed once per (frequency vector, position) by rope_angles and then read, instead of
// recomputed (double-precision sin/cos) by every rope call of every layer. The table holds exactly
// rope_angles' output, so a rotation read from it has the same bits as one computed on the spot.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ds4::cpu {

/// Lazily filled rotation tables, one per distinct frequency vector (compared by value: the layers
/// of a model share two or three, whatever tensors hold them). Row `pos` of a table is
/// rope_angles(freqs, half, pos) = [cos_0, sin_0, cos_1, sin_1, ...] (2 * half floats); positions
/// are filled in blocks of kBlock on first use and kept until the table is destroyed (memory:
/// 8 * half bytes per position reached, e.g. 256 MiB per table at 2^20 positions for half = 32).
/// Thread-safe: rows() may be called concurrently; a returned row stays valid and unchanged for
/// the table's lifetime.
class RopeRotationTable {
 public:
  /// Positions per block filled at once.
  static constexpr int64_t kBlock = 256;
  /// Most distinct frequency vectors kept; beyond that rows() returns false (compute directly).
  static constexpr size_t kMaxTables = 64;
  /// Largest position served (float(pos) is exact below 2^24); beyond it rows() returns false.
  static constexpr int64_t kMaxPos = int64_t{1} << 24;

  RopeRotationTable();
  ~RopeRotationTable();
  RopeRotationTable(const RopeRotationTable&) = delete;
  RopeRotationTable& operator=(const RopeRotationTable&) = delete;

  /// out[t] = the row of pos[t] (t < n) in the table of freqs[half] (0 < half <= 4096). Returns
  /// false, leaving out unspecified, when some pos[t] is outside [0, kMaxPos) or the table count
  /// is at kMaxTables and freqs is new: the caller then uses rope_angles itself.
  bool rows(const float* freqs, int half, const int32_t* pos, int64_t n, const float** out);
  /// The row of one position (e.g. a compressed block's start position), or nullptr where rows()
  /// would return false.
  const float* row(const float* freqs, int half, int64_t pos);

 private:
  struct Table;
  Table* find_or_add(const float* freqs, int half);  // under mu_; nullptr at kMaxTables
  const float* row_locked(Table& t, int64_t pos);    // under mu_
  std::mutex mu_;
  std::vector<std::unique_ptr<Table>> tables_;
};

}  // namespace ds4::cpu
