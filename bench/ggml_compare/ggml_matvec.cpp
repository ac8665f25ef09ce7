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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Options {
  int threads = 2;
  std::vector<std::string> types = {"q8_0", "q2_K", "iq2_xxs", "iq2_xs", "iq1_s", "iq1_m", "mxfp4"};
  double min_time = 0.5;
  int reps = 3;
  long long pool_mib = 1024;
};

struct Shape {
  const char* tag;
  int64_t rows, cols;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ggml_matvec: %s\nusage: ggml_matvec [--threads N] [--types q8_0,mxfp4,...] [--min-time SEC] "
               "[--reps R] [--pool-mib M]\n",
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
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (o.threads < 1 || o.threads > 1024) usage("--threads must be in 1..1024");
  if (o.min_time <= 0 || o.reps < 1 || o.pool_mib < 1) usage("--min-time, --reps and --pool-mib must be positive");
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

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ggml_cpu_init();
  const Shape shapes[] = {{"expert_down_4096x2048", 4096, 2048}, {"expert_up_2048x4096", 2048, 4096}};
  ggml_threadpool_params tpp = ggml_threadpool_params_default(opt.threads);
  ggml_threadpool* tp = ggml_threadpool_new(&tpp);
  if (tp == nullptr) {
    std::fprintf(stderr, "ggml_matvec: ggml_threadpool_new failed\n");
    return 1;
  }
  std::fprintf(stderr, "ggml_matvec: %d threads, pool %lld MiB, min time %.2f s x %d reps\n", opt.threads,
               opt.pool_mib, opt.min_time, opt.reps);

  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.1f, 2.0f);
  for (const std::string& tname : opt.types) {
    const ggml_type type = type_by_name(tname);
    const ggml_type vdt = ggml_get_type_traits_cpu(type)->vec_dot_type;
    for (const Shape& sh : shapes) {
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
      const size_t copies = std::max<size_t>(1, size_t(opt.pool_mib << 20) / mat_bytes);
      std::vector<uint8_t> pool(copies * mat_bytes + 64);
      uint8_t* base = pool.data() + (64 - reinterpret_cast<uintptr_t>(pool.data()) % 64) % 64;
      for (size_t i = 0; i < copies; ++i) std::memcpy(base + i * mat_bytes, q.data(), mat_bytes);

      std::vector<float> x(size_t(sh.cols)), y(size_t(sh.rows));
      for (auto& v : x) v = nd(rng);
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
      c.plan = ggml_graph_plan(c.graphs[0], opt.threads, tp);
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
        std::printf("ggml,%s,%s,%lld,%lld,%d,%s,%s,%.3f,%.4f,%.3f\n", ggml_type_name(type), sh.tag, (long long)sh.rows,
                    (long long)sh.cols, opt.threads, cold ? "cold" : "hot", ggml_type_name(vdt),
                    double(mat_bytes) / sec * 1e-9, sec * 1e3, double(mat_bytes) / cpu_sec * 1e-9);
        std::fflush(stdout);
      }
      ggml_free(ctx);
    }
  }
  ggml_threadpool_free(tp);
  ggml_quantize_free();
  return 0;
}
