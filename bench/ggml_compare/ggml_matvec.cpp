// bench/ggml_compare/ggml_matvec.cpp — our driver of ggml's CPU matrix-vector product, for the
// comparison with bench_cpu_kernels (scripts/bench_ggml_compare.sh, bench/README.md).
//
// For each weight type and DeepSeek-V4-Flash expert shape (rows x cols = 4096x2048 "down",
// 2048x4096 "up"): random N(0,1) weights quantized by ggml's own quantizer (ggml_quantize_chunk;
// the types that need an importance matrix get a random positive one), one F32 activation column,
// y = ggml_mul_mat(W, x) computed by ggml_graph_compute on an explicit ggml threadpool of
// --threads threads. Timed per call: ggml quantizes x to the type's vec_dot_type (Q8_0 or Q8_K)
// inside the op, then runs its dot kernels; graph planning is done once, outside the timing.
//  * cold: every call reads the next of many copies of the matrix (pool >= --pool-mib MiB), so the
//    weights come from DRAM (as bench_cpu_kernels' "cold");
//  * hot: the same matrix every call (cache-resident).
// Output: one CSV line per case on stdout:
//   ggml,<type>,<shape tag>,<rows>,<cols>,<threads>,<cold|hot>,<vec_dot_type>,<GB/s>,<ms per call>,<cpu GB/s>
// GB/s = weight bytes per call / wall seconds per call / 1e9 (median of --reps timed runs);
// cpu GB/s = the same per second of process CPU time (std::clock): with one thread it is the
// kernel's speed per core even when other processes share the core (with more threads it also
// counts spinning, so only the 1-thread figure is a kernel measure).
//
// Usage: ggml_matvec [--threads N] [--types q8_0,mxfp4,...] [--min-time SEC] [--reps R] [--pool-mib M]
//                    [--check 0|1] [--rtr 0|1]
// --check 1: after the warm-up, compare y with a double-precision product of ggml's own dequantized
// weights and x (stderr; the difference includes ggml's activation quantization).
//
// Built with DS4_GGML_IK=1 (target ik_matvec, CMake -DDS4_GGML_FLAVOR=ik) the same driver runs
// against ik_llama.cpp's ggml: no ggml-cpu.h and no threadpool API there, so ggml_graph_plan takes
// the thread count and ggml_graph_compute runs the threads (OpenMP, or threads created per call
// without it); its mul_mat goes to iqk_mul_mat. The first CSV field is "ik" instead of "ggml".
// --rtr 1 (ik only, off by default) repacks each weight matrix once with iqk_repack_tensor (what
// ik_llama.cpp's -rtr does at load time) into its row-interleaved type (q8_0 -> q8_0_r8, q2_K ->
// q2_k_r4, iq2_xxs/iq2_xs -> *_r4; types without a repack stay as they are); the type column then
// names the repacked type, so these rows never match our (GGUF-layout) kernels in the script.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if DS4_GGML_IK
#include "ggml.h"
// Exported (C linkage) by ik_llama.cpp's ggml library, declared in its src/iqk/iqk_quantize.h.
extern "C" void iqk_repack_tensor(struct ggml_tensor* tensor);
#else
#include "ggml-cpu.h"
#include "ggml.h"
#endif

namespace {

struct Options {
  int threads = 2;
  std::vector<std::string> types = {"q8_0", "q2_K", "iq2_xxs", "iq2_xs", "iq1_s", "iq1_m", "mxfp4"};
  double min_time = 0.5;
  int reps = 3;
  long long pool_mib = 1024;
  bool check = false;
  bool rtr = false;
};

struct Shape {
  const char* tag;
  int64_t rows, cols;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ggml_matvec: %s\nusage: ggml_matvec [--threads N] [--types q8_0,mxfp4,...] [--min-time SEC] "
               "[--reps R] [--pool-mib M] [--check 0|1] [--rtr 0|1 (ik only)]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--threads") {
      o.threads = std::atoi(v);
    } else if (a == "--types") {
      o.types.clear();
      std::string s = v;
      for (size_t p = 0; p <= s.size();) {
        const size_t q = std::min(s.find(',', p), s.size());
        if (q > p) o.types.push_back(s.substr(p, q - p));
        p = q + 1;
      }
    } else if (a == "--min-time") {
      o.min_time = std::atof(v);
    } else if (a == "--reps") {
      o.reps = std::atoi(v);
    } else if (a == "--pool-mib") {
      o.pool_mib = std::atoll(v);
    } else if (a == "--check") {
      o.check = std::atoi(v) != 0;
    } else if (a == "--rtr") {
      o.rtr = std::atoi(v) != 0;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (o.threads < 1 || o.threads > 1024) usage("--threads must be in 1..1024");
  if (o.min_time <= 0 || o.reps < 1 || o.pool_mib < 1) usage("--min-time, --reps and --pool-mib must be positive");
#if !DS4_GGML_IK
  if (o.rtr) usage("--rtr needs ik_llama.cpp's ggml (ik_matvec)");
#endif
  return o;
}

ggml_type type_by_name(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(ggml_type(t));
    if (n != nullptr && name == n) return ggml_type(t);
  }
  usage(("unknown ggml type name " + name).c_str());
}

/// One timed configuration: a graph per weight copy (same x and y), planned once.
struct Case {
  std::vector<ggml_cgraph*> graphs;
  ggml_cplan plan{};
  std::vector<uint8_t> work;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#if DS4_GGML_IK
const char* const kTag = "ik";
ggml_type vec_dot_type_of(ggml_type t) { return ggml_internal_get_type_traits(t).vec_dot_type; }
ggml_to_float_t to_float_of(ggml_type t) { return ggml_internal_get_type_traits(t).to_float; }
#else
const char* const kTag = "ggml";
ggml_type vec_dot_type_of(ggml_type t) { return ggml_get_type_traits_cpu(t)->vec_dot_type; }
ggml_to_float_t to_float_of(ggml_type t) { return ggml_get_type_traits(t)->to_float; }
#endif

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const Shape shapes[] = {{"expert_down_4096x2048", 4096, 2048}, {"expert_up_2048x4096", 2048, 4096}};
#if DS4_GGML_IK
  ggml_free(ggml_init({1 << 16, nullptr, false}));  // fills ggml's tables (no ggml_cpu_init there)
#else
  ggml_cpu_init();
  ggml_threadpool_params tpp = ggml_threadpool_params_default(opt.threads);
  ggml_threadpool* tp = ggml_threadpool_new(&tpp);
  if (tp == nullptr) {
    std::fprintf(stderr, "ggml_matvec: ggml_threadpool_new failed\n");
    return 1;
  }
#endif
  std::fprintf(stderr, "ggml_matvec: %d threads, pool %lld MiB, min time %.2f s x %d reps\n", opt.threads,
               opt.pool_mib, opt.min_time, opt.reps);

  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.1f, 2.0f);
  for (const std::string& tname : opt.types) {
    const ggml_type qtype = type_by_name(tname);
    for (const Shape& sh : shapes) {
      ggml_type type = qtype;
      const size_t row_bytes = ggml_row_size(type, sh.cols);
      const size_t mat_bytes = row_bytes * size_t(sh.rows);
      // Random weights quantized by ggml (rows split over the threads: the quantizer is slow).
      std::vector<float> wf(size_t(sh.rows * sh.cols));
      for (auto& v : wf) v = nd(rng);
      std::vector<float> imatrix(size_t(sh.cols));
      for (auto& v : imatrix) v = ud(rng);
      const float* im = ggml_quantize_requires_imatrix(type) ? imatrix.data() : nullptr;
      ggml_quantize_init(type);
      std::vector<uint8_t> q(mat_bytes);
      {
        std::vector<std::thread> ths;
        const int nq = opt.threads;
        for (int t = 0; t < nq; ++t) {
          ths.emplace_back([&, t] {
            const int64_t r0 = sh.rows * t / nq, r1 = sh.rows * (t + 1) / nq;
            ggml_quantize_chunk(type, wf.data(), q.data(), r0 * sh.cols, r1 - r0, sh.cols, im);
          });
        }
        for (auto& th : ths) th.join();
      }
      std::vector<float> x(size_t(sh.cols)), y(size_t(sh.rows));
      for (auto& v : x) v = nd(rng);
      std::vector<double> yref;
      if (opt.check) {  // reference from the GGUF-layout bytes, before any repacking
        std::vector<float> row(size_t(sh.cols));
        for (int64_t r = 0; r < sh.rows; ++r) {
          to_float_of(type)(q.data() + size_t(r) * row_bytes, row.data(), sh.cols);
          double acc = 0;
          for (int64_t k = 0; k < sh.cols; ++k) acc += double(row[size_t(k)]) * double(x[size_t(k)]);
          yref.push_back(acc);
        }
      }
#if DS4_GGML_IK
      if (opt.rtr) {  // iqk_repack_tensor rewrites the data in place and changes the tensor's type
        ggml_context* rc = ggml_init({ggml_tensor_overhead() + 1024, nullptr, /*no_alloc=*/true});
        ggml_tensor* rt = ggml_new_tensor_2d(rc, type, sh.cols, sh.rows);
        rt->data = q.data();
        iqk_repack_tensor(rt);
        type = rt->type;
        ggml_free(rc);
        if (ggml_row_size(type, sh.cols) != row_bytes) {
          std::fprintf(stderr, "ggml_matvec: repacked %s has another row size\n", ggml_type_name(type));
          return 1;
        }
        std::fprintf(stderr, "ggml_matvec: --rtr: %s -> %s\n", ggml_type_name(qtype), ggml_type_name(type));
      }
#endif
      const ggml_type vdt = vec_dot_type_of(type);
      const size_t copies = std::max<size_t>(1, size_t(opt.pool_mib << 20) / mat_bytes);
      std::vector<uint8_t> pool(copies * mat_bytes + 64);
      uint8_t* base = pool.data() + (64 - reinterpret_cast<uintptr_t>(pool.data()) % 64) % 64;
      for (size_t i = 0; i < copies; ++i) std::memcpy(base + i * mat_bytes, q.data(), mat_bytes);

      ggml_init_params ip = {ggml_tensor_overhead() * (3 * copies + 8) + ggml_graph_overhead() * copies + (1 << 20),
                             nullptr, /*no_alloc=*/true};
      ggml_context* ctx = ggml_init(ip);
      ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, sh.cols, 1);
      xt->data = x.data();
      Case c;
      for (size_t i = 0; i < copies; ++i) {
        ggml_tensor* w = ggml_new_tensor_2d(ctx, type, sh.cols, sh.rows);
        w->data = base + i * mat_bytes;
        ggml_tensor* yt = ggml_mul_mat(ctx, w, xt);
        yt->data = y.data();
        ggml_cgraph* gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, yt);
        c.graphs.push_back(gf);
      }
#if DS4_GGML_IK
      c.plan = ggml_graph_plan(c.graphs[0], opt.threads);
#else
      c.plan = ggml_graph_plan(c.graphs[0], opt.threads, tp);
#endif
      c.work.resize(c.plan.work_size + 64);
      c.plan.work_data = c.work.data();

      for (const bool cold : {true, false}) {
        using Clock = std::chrono::steady_clock;
        size_t next = 0;
        auto call = [&] {
          ggml_cgraph* g = c.graphs[cold ? next++ % copies : 0];
          if (ggml_graph_compute(g, &c.plan) != GGML_STATUS_SUCCESS) {
            std::fprintf(stderr, "ggml_matvec: ggml_graph_compute failed\n");
            std::exit(1);
          }
        };
        for (int i = 0; i < 3; ++i) call();  // warm-up (threads, caches)
        if (opt.check && !cold) {
          double num = 0, den = 0;
          for (size_t r = 0; r < y.size(); ++r) {
            num += (double(y[r]) - yref[r]) * (double(y[r]) - yref[r]);
            den += yref[r] * yref[r];
          }
          std::fprintf(stderr, "ggml_matvec: check %s %s: relative L2 error %.2e vs dequantized weights\n",
                       ggml_type_name(type), sh.tag, std::sqrt(num / den));
        }
        std::vector<double> per_call, cpu_per_call;
        for (int r = 0; r < opt.reps; ++r) {
          int64_t n = 0;
          const auto t0 = Clock::now();
          const std::clock_t c0 = std::clock();
          double s = 0;
          do {
            call();
            ++n;
            s = std::chrono::duration<double>(Clock::now() - t0).count();
          } while (s < opt.min_time);
          per_call.push_back(s / double(n));
          cpu_per_call.push_back(double(std::clock() - c0) / CLOCKS_PER_SEC / double(n));
        }
        const double sec = median(per_call), cpu_sec = median(cpu_per_call);
        std::printf("%s,%s,%s,%lld,%lld,%d,%s,%s,%.3f,%.4f,%.3f\n", kTag, ggml_type_name(type), sh.tag,
                    (long long)sh.rows, (long long)sh.cols, opt.threads, cold ? "cold" : "hot", ggml_type_name(vdt),
                    double(mat_bytes) / sec * 1e-9, sec * 1e3, double(mat_bytes) / cpu_sec * 1e-9);
        std::fflush(stdout);
      }
      ggml_free(ctx);
    }
  }
#if !DS4_GGML_IK
  ggml_threadpool_free(tp);
#endif
  ggml_quantize_free();
  return 0;
}
