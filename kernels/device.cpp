// kernels/device.cpp — the backend-independent parts of kernels/device.h: tensor views, typed
// allocation and binding helpers, backend selection.
#include "kernels/device.h"

#include <cstdio>
#include <cstdlib>

#include "ds4/result.h"
#ifdef DS4_HAVE_CUDA
#include "kernels/cuda/device_cuda.h"
#endif

namespace ds4::dev {
namespace {

const GgmlTypeGeometry& geometry(GgmlType t) {
  const GgmlTypeGeometry* g = ggml_type_geometry(static_cast<uint32_t>(t));
  DS4_CHECK(g != nullptr);
  return *g;
}

}  // namespace

uint64_t row_bytes_of(GgmlType type, int64_t n) {
  const GgmlTypeGeometry& g = geometry(type);
  DS4_CHECK(n % g.block_elems == 0);
  return static_cast<uint64_t>(n / g.block_elems * g.block_bytes);
}

uint64_t Tensor::row_data_bytes() const { return row_bytes_of(type, ne0); }

bool Tensor::contiguous() const {
  return nb1 == row_data_bytes() && (ne2 <= 1 || nb2 == static_cast<uint64_t>(ne1) * nb1);
}

Tensor Tensor::rows_view(int64_t r0, int64_t r1) const {
  DS4_CHECK(0 <= r0 && r0 <= r1 && r1 <= ne1 && ne2 == 1);
  Tensor v = *this;
  v.offset = offset + static_cast<uint64_t>(r0) * nb1;
  v.ne1 = r1 - r0;
  v.nb2 = static_cast<uint64_t>(v.ne1) * nb1;
  return v;
}

Tensor Tensor::cols_view(int64_t c0, int64_t c1) const {
  const GgmlTypeGeometry& g = geometry(type);
  DS4_CHECK(0 <= c0 && c0 <= c1 && c1 <= ne0 && c0 % g.block_elems == 0 && c1 % g.block_elems == 0);
  Tensor v = *this;
  v.offset = offset + static_cast<uint64_t>(c0 / g.block_elems * g.block_bytes);
  v.ne0 = c1 - c0;
  return v;  // nb1, nb2 stay the parent's
}

Tensor Tensor::reshaped(int64_t row_len, int64_t rows) const {
  DS4_CHECK(contiguous() && row_len * rows == ne0 * ne1 * ne2);
  Tensor v = *this;
  v.ne0 = row_len;
  v.ne1 = rows;
  v.ne2 = 1;
  v.nb1 = row_bytes_of(type, row_len);
  v.nb2 = static_cast<uint64_t>(rows) * v.nb1;
  return v;
}

Tensor Tensor::plane(int64_t p) const {
  DS4_CHECK(0 <= p && p < ne2);
  Tensor v = *this;
  v.offset = offset + static_cast<uint64_t>(p) * nb2;
  v.ne2 = 1;
  v.nb2 = static_cast<uint64_t>(ne1) * nb1;
  return v;
}

OwnedTensor Device::alloc_tensor(GgmlType type, int64_t row_len, int64_t rows, int64_t planes) {
  DS4_CHECK(row_len >= 0 && rows >= 0 && planes >= 1);
  const uint64_t rb = row_bytes_of(type, row_len);
  OwnedTensor o;
  o.buffer = alloc(rb * static_cast<uint64_t>(rows) * static_cast<uint64_t>(planes));
  o.t = Tensor{o.buffer.get(), 0, type, row_len, rows, planes, rb, rb * static_cast<uint64_t>(rows)};
  return o;
}

Tensor Device::bind_f32(const float* p, int64_t n) {
  return bind(WeightMatrix{GgmlType::F32, reinterpret_cast<const uint8_t*>(p), n, 1, static_cast<uint64_t>(n) * 4});
}

Tensor Device::bind_i32(const int32_t* p, int64_t row_len, int64_t rows) {
  return bind(WeightMatrix{GgmlType::I32, reinterpret_cast<const uint8_t*>(p), row_len, rows,
                           static_cast<uint64_t>(row_len) * 4});
}

namespace {

std::function<std::unique_ptr<Device>(int)>& cuda_factory() {
  static std::function<std::unique_ptr<Device>(int)> f;
  return f;
}
std::function<int()>& cuda_factory_count() {
  static std::function<int()> f;
  return f;
}

/// CUDA devices this process can make (the test factory's count; one when it gives none).
int cuda_devices() {
  if (cuda_factory()) return cuda_factory_count() ? cuda_factory_count()() : 1;
#ifdef DS4_HAVE_CUDA
  return cuda::cuda_device_count();
#else
  return 0;
#endif
}

}  // namespace

void set_cuda_device_factory(std::function<std::unique_ptr<Device>(int ordinal)> f, std::function<int()> count) {
  cuda_factory() = std::move(f);
  cuda_factory_count() = std::move(count);
}

int cuda_device_count() { return cuda_devices(); }

Result<BackendKind> parse_backend(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "cuda") {
    if (cuda_devices() > 0) return BackendKind::Cuda;
#ifdef DS4_HAVE_CUDA
    return Error{"backend 'cuda': expected a CUDA device, found none (the CUDA runtime reports 0 devices)"};
#else
    return Error{"backend 'cuda': expected a build with the CUDA backend, found one built without CUDA (no nvcc)"};
#endif
  }
  if (name == "auto") {
    if (cuda_devices() > 0) return BackendKind::Cuda;
    std::fprintf(stderr, "ds4: --backend auto: no CUDA device found, using the CPU backend\n");
    return BackendKind::Cpu;
  }
  // An empty value (`--backend ''`, an unset variable) is refused like any other word, not read as auto.
  return Error{"backend " + (name.empty() ? std::string("''") : "'" + name + "'") + ": expected cpu, cuda or auto, found " +
               (name.empty() ? std::string("an empty string") : "'" + name + "'")};
}

std::unique_ptr<Device> make_device(BackendKind k, int threads, int ordinal) {
  if (k == BackendKind::Cpu) return make_cpu_device(threads);
  if (cuda_factory()) return cuda_factory()(ordinal);
#ifdef DS4_HAVE_CUDA
  auto d = cuda::make_cuda_device(cuda::CudaDeviceOptions{ordinal});
  if (!d.ok()) {
    std::fprintf(stderr, "ds4: %s\n", d.error().message.c_str());
    std::abort();
  }
  return std::move(*d);
#else
  DS4_CHECK(false && "make_device(Cuda) in a build without CUDA (parse_backend refuses it)");
  return nullptr;
#endif
}

}  // namespace ds4::dev
