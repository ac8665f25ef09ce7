// kernels/device_types.cpp — which ggml types a device can bind as weights (kernels/device.h
// can_bind_type). Its own file so that readers which only validate a model (the loader's config
// check, the fuzz targets) do not link a backend.
#include "kernels/cpu/quant_ref.h"
#include "kernels/device.h"

namespace ds4::dev {

// Every backend decodes the types the CPU reference decodes (the CPU defines the numerics).
bool can_bind_type(GgmlType type) { return type == GgmlType::F32 || cpu::can_dequantize(type); }

}  // namespace ds4::dev
