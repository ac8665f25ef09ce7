// placement/gpu_estimates.cpp — see gpu_estimates.h. Memory bandwidths and FP32 peaks are the
// vendors' public datasheet figures (NVIDIA product pages / datasheets for each card).
#include "placement/gpu_estimates.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace ds4::placement {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

/// Known cards, specific names first. tflops = ~0.7 x FP32 peak (see the header).
const std::vector<GpuEstimate>& known_gpu_estimates() {
  static const std::vector<GpuEstimate> table = {
      {"RTX 2080 Ti", 616, 0.6, 10, "as configs/hw/4x2080ti-22g-pcie3-2s.json (616 GB/s GDDR6 spec)"},
      {"RTX 3080", 760, 0.6, 20, "as configs/hw/2x3080-20g-pcie3.json (760 GB/s GDDR6X spec)"},
      {"RTX 3090", 936, 0.6, 25, "spec 936 GB/s, FP32 35.6 TFLOPS"},
      {"RTX 4090", 1008, 0.6, 58, "spec 1008 GB/s, FP32 82.6 TFLOPS"},
      {"Tesla T4", 320, 0.6, 5.7, "spec 320 GB/s, FP32 8.1 TFLOPS"},
      {"L40S", 864, 0.6, 64, "spec 864 GB/s, FP32 91.6 TFLOPS"},
      {"A100-SXM4-80GB", 2039, 0.6, 14, "spec 2039 GB/s HBM2e, FP32 19.5 TFLOPS"},
      {"A100 80GB PCIe", 1935, 0.6, 14, "spec 1935 GB/s HBM2e, FP32 19.5 TFLOPS"},
      {"A100", 1555, 0.6, 14, "spec 1555 GB/s (40 GB), FP32 19.5 TFLOPS"},
      {"H100 PCIe", 2000, 0.6, 36, "spec 2.0 TB/s HBM2e, FP32 51 TFLOPS"},
      {"H100 NVL", 3900, 0.6, 42, "spec 3.9 TB/s HBM3, FP32 60 TFLOPS"},
      {"H100", 3350, 0.6, 47, "spec 3.35 TB/s HBM3 (SXM), FP32 67 TFLOPS"},
      {"H200", 4800, 0.6, 47, "spec 4.8 TB/s HBM3e, FP32 67 TFLOPS (SXM)"},
  };
  return table;
}

}  // namespace

GpuEstimate gpu_estimate_for_name(const std::string& cuda_name) {
  const std::string n = lower(cuda_name);
  for (const GpuEstimate& e : known_gpu_estimates())
    if (n.find(lower(e.match)) != std::string::npos) return e;
  // Unknown card: below every card in the table, so a plan never counts on speed it may not have.
  return {"", 300, 0.5, 5, "unknown card: conservative default"};
}

}  // namespace ds4::placement
