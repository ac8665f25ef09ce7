// staging/nvme_reader.cpp — see nvme_reader.h. liburing API: axboe/liburing (io_uring_queue_init,
// io_uring_get_probe_ring, io_uring_register_buffers/files, io_uring_prep_read[_fixed]).
#include "staging/nvme_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "staging/memory_limits.h"

namespace ds4::staging {

const char* reader_backend_name(ReaderBackend b) {
  switch (b) {
    case ReaderBackend::UringFixed: return "io_uring+fixed-buffers";
    case ReaderBackend::Uring: return "io_uring";
    case ReaderBackend::PreadPool: return "pread-pool";
  }
  return "?";
}

void apply_reader_env(ReaderOptions* o) {
  auto on = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
  };
  if (on("DS4_DISABLE_IO_URING")) o->disable_uring = true;
  if (on("DS4_DISABLE_FIXED_BUFFERS")) o->disable_fixed_buffers = true;
  if (on("DS4_NO_O_DIRECT")) o->direct = false;
  if (on("DS4_INJECT_O_DIRECT_EINVAL")) o->inject_direct_einval = true;
}

namespace {

using Clock = std::chrono::steady_clock;

struct File {
  std::string path;
  int fd_direct = -1;    // O_DIRECT descriptor, -1 when refused or not requested
  int fd_buffered = -1;  // always open
  uint64_t size = 0;
  bool direct = false;   // reads currently go through fd_direct
};

/// One aligned covering read serving bytes [req_off, req_off+n) of request `req`.
struct Piece {
  size_t req = 0;
  uint64_t req_off = 0;
  int file = 0;
  uint64_t aligned_off = 0;  // file offset of the read (aligned)
  uint64_t aligned_len = 0;  // bytes read (aligned, <= buffer_bytes)
  uint64_t skip = 0;         // useful bytes start at buffer + skip
  uint64_t n = 0;            // useful bytes
  int retries = 0;
};

/// pread until `len` bytes or EOF; EINTR/EAGAIN retried. Returns bytes read or -errno.
int64_t pread_full(int fd, uint8_t* buf, uint64_t len, uint64_t off) {
  uint64_t done = 0;
  int again = 0;
  while (done < len) {
    const ssize_t r = ::pread(fd, buf + done, len - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == ENOMEM) && again++ < 100) {
        std::this_thread::sleep_for(std::chrono::microseconds(100 << std::min(again, 6)));
        continue;
      }
      return -errno;
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  return static_cast<int64_t>(done);
}

/// Completion of one submitted piece: slot index and result (bytes or -errno).
struct Completion {
  int slot = -1;
  int64_t res = 0;
};

}  // namespace

struct NvmeReader::Impl {
  ReaderOptions opt;
  std::vector<File> files;
  ReaderBackend backend = ReaderBackend::PreadPool;
  std::string reason;
  uint8_t* buffers = nullptr;  // queue_depth * buffer_bytes, aligned
  int nbuf = 0;

  // io_uring state
  io_uring ring{};
  bool ring_ok = false;
  bool fixed_files = false;  // file table: [2*f] = direct fd (or buffered if none), [2*f+1] = buffered

  // pread pool state
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv_job, cv_done;
  struct Job {
    int slot, fd;
    uint8_t* buf;
    uint64_t len, off;
  };
  std::deque<Job> jobs;
  std::deque<Completion> done_q;
  bool stop = false;

  // counters
  ReaderCounters c;
  std::vector<float> lat_us;
  uint64_t lat_next = 0;
  uint64_t completions = 0;

  uint8_t* buf(int slot) const { return buffers + static_cast<uint64_t>(slot) * opt.buffer_bytes; }

  ~Impl() {
    if (!workers.empty()) {
      {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
      }
      cv_job.notify_all();
      for (auto& t : workers) t.join();
    }
    if (ring_ok) io_uring_queue_exit(&ring);
    for (File& f : files) {
      if (f.fd_direct >= 0) ::close(f.fd_direct);
      if (f.fd_buffered >= 0) ::close(f.fd_buffered);
    }
    std::free(buffers);
  }

  void start_pool() {
    for (int i = 0; i < std::max(1, opt.pread_threads); ++i)
      workers.emplace_back([this] {
        for (;;) {
          Job j;
          {
            std::unique_lock<std::mutex> lk(mu);
            cv_job.wait(lk, [&] { return stop || !jobs.empty(); });
            if (stop) return;
            j = jobs.front();
            jobs.pop_front();
          }
          const ssize_t r = ::pread(j.fd, j.buf, j.len, static_cast<off_t>(j.off));
          Completion cpl{j.slot, r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r)};
          {
            std::lock_guard<std::mutex> lk(mu);
            done_q.push_back(cpl);
          }
          cv_done.notify_one();
        }
      });
  }

  int fd_of(const Piece& p) const {
    const File& f = files[static_cast<size_t>(p.file)];
    return f.direct ? f.fd_direct : f.fd_buffered;
  }

  /// Queues one read of piece `p` into buffer `slot`. Returns false when the submission queue is
  /// full (io_uring; caller submits and retries).
  bool queue(int slot, const Piece& p) {
    uint8_t* b = buf(slot);
    if (backend == ReaderBackend::PreadPool) {
      {
        std::lock_guard<std::mutex> lk(mu);
        jobs.push_back({slot, fd_of(p), b, p.aligned_len, p.aligned_off});
      }
      cv_job.notify_one();
      return true;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) return false;
    const File& f = files[static_cast<size_t>(p.file)];
    int fd = fd_of(p);
    if (fixed_files) fd = 2 * p.file + (f.direct ? 0 : 1);
    if (backend == ReaderBackend::UringFixed)
      io_uring_prep_read_fixed(sqe, fd, b, static_cast<unsigned>(p.aligned_len), p.aligned_off, slot);
    else
      io_uring_prep_read(sqe, fd, b, static_cast<unsigned>(p.aligned_len), p.aligned_off);
    if (fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    return true;
  }

  /// Submits what was queued (io_uring). EAGAIN/EBUSY are left for the next call.
  void submit() {
    if (backend == ReaderBackend::PreadPool) return;
    const int r = io_uring_submit(&ring);
    if (r == -EAGAIN || r == -EBUSY || r == -EINTR) ++c.retries;
  }

  Completion wait_one() {
    if (backend == ReaderBackend::PreadPool) {
      std::unique_lock<std::mutex> lk(mu);
      cv_done.wait(lk, [&] { return !done_q.empty(); });
      Completion cpl = done_q.front();
      done_q.pop_front();
      return cpl;
    }
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe) {
        Completion cpl{static_cast<int>(io_uring_cqe_get_data64(cqe)), cqe->res};
        io_uring_cqe_seen(&ring, cqe);
        return cpl;
      }
      // Submits anything a refused io_uring_submit left in the queue, then waits for one.
      const int r = io_uring_submit_and_wait(&ring, 1);
      if (r == -EAGAIN || r == -EBUSY) {
        ++c.retries;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        DS4_CHECK(r >= 0 || r == -EINTR);
      }
    }
  }

  void record_latency(Clock::time_point t0) {
    const float us = std::chrono::duration<float, std::micro>(Clock::now() - t0).count();
    constexpr size_t kMax = size_t(1) << 18;
    if (lat_us.size() < kMax)
      lat_us.push_back(us);
    else
      lat_us[lat_next++ % kMax] = us;
  }

  Result<void> run(std::span<const ReadRequest> reqs, const ReadCallback& cb);
  Result<void> probe();
};

Result<void> NvmeReader::Impl::run(std::span<const ReadRequest> reqs, const ReadCallback& cb) {
  const uint64_t A = opt.alignment, B = opt.buffer_bytes;
  std::deque<Piece> pending;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ReadRequest& r = reqs[i];
    if (r.file < 0 || r.file >= static_cast<int>(files.size()))
      return Error{"nvme reader: request " + std::to_string(i) + ": file index " + std::to_string(r.file) +
                   " out of range [0, " + std::to_string(files.size()) + ")"};
    const File& f = files[static_cast<size_t>(r.file)];
    if (r.offset > f.size || r.length > f.size - r.offset)
      return Error{f.path + ": read of " + std::to_string(r.length) + " bytes at offset " +
                   std::to_string(r.offset) + " exceeds the file size " + std::to_string(f.size)};
    uint64_t pos = r.offset;
    const uint64_t end = r.offset + r.length;
    while (pos < end) {
      Piece p;
      p.req = i;
      p.req_off = pos - r.offset;
      p.file = r.file;
      p.aligned_off = pos / A * A;
      p.skip = pos - p.aligned_off;
      p.n = std::min(end - pos, B - p.skip);
      p.aligned_len = (p.skip + p.n + A - 1) / A * A;
      pending.push_back(p);
      pos += p.n;
    }
  }
  struct Slot {
    Piece p;
    Clock::time_point t0;
    bool busy = false;
  };
  std::vector<Slot> slots(static_cast<size_t>(nbuf));
  std::vector<int> free_slots;
  for (int s = nbuf - 1; s >= 0; --s) free_slots.push_back(s);
  int inflight = 0;
  std::string first_error;

  auto deliver = [&](const Piece& p, const uint8_t* b, bool direct) {
    cb(p.req, p.req_off, b + p.skip, p.n);
    c.bytes += p.n;
    c.device_bytes += p.aligned_len;
    ++c.reads;
    if (direct)
      ++c.direct_reads;
    else
      ++c.buffered_reads;
  };
  // Finishes a piece synchronously with pread on the buffered descriptor.
  auto finish_with_pread = [&](const Piece& p, uint8_t* b, uint64_t have) -> bool {
    const File& f = files[static_cast<size_t>(p.file)];
    const uint64_t need = p.skip + p.n;
    const int64_t r = pread_full(f.fd_buffered, b + have, need - have, p.aligned_off + have);
    if (r < 0 || static_cast<uint64_t>(r) < need - have) {
      if (first_error.empty())
        first_error = f.path + ": read at offset " + std::to_string(p.aligned_off + have) + " failed: " +
                      (r < 0 ? std::strerror(static_cast<int>(-r)) : "unexpected end of file");
      return false;
    }
    return true;
  };

  while (!pending.empty() || inflight > 0) {
    bool queued = false;
    while (first_error.empty() && !pending.empty() && !free_slots.empty()) {
      const int s = free_slots.back();
      if (!queue(s, pending.front())) break;
      free_slots.pop_back();
      slots[static_cast<size_t>(s)] = {pending.front(), Clock::now(), true};
      pending.pop_front();
      ++inflight;
      queued = true;
    }
    if (!first_error.empty()) pending.clear();
    if (queued) submit();
    if (inflight == 0) continue;
    Completion cpl = wait_one();
    Slot& sl = slots[static_cast<size_t>(cpl.slot)];
    DS4_CHECK(sl.busy);
    --inflight;
    Piece p = sl.p;
    File& f = files[static_cast<size_t>(p.file)];
    const bool direct = f.direct;
    int64_t res = cpl.res;
    if (direct && opt.inject_direct_einval) res = -EINVAL;
    if (opt.inject_eagain_every > 0 && ++completions % static_cast<uint64_t>(opt.inject_eagain_every) == 0)
      res = -EAGAIN;
    sl.busy = false;
    free_slots.push_back(cpl.slot);
    if (res == -EAGAIN || res == -ENOMEM || res == -EINTR) {
      ++c.retries;
      if (++p.retries > 6) {
        // Keep failing: finish this piece with pread so the request is not lost.
        ++c.fallback_preads;
        uint8_t* b = buf(cpl.slot);
        if (finish_with_pread(p, b, 0)) {
          record_latency(sl.t0);
          deliver(p, b, false);
        }
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20 << p.retries));
        pending.push_front(p);
      }
      continue;
    }
    if (res == -EINVAL && direct) {
      // O_DIRECT refused (filesystem without direct I/O, or misalignment): buffered from now on.
      f.direct = false;
      ++c.direct_refused;
      pending.push_front(p);
      continue;
    }
    if (res < 0) {
      if (first_error.empty())
        first_error = f.path + ": read of " + std::to_string(p.aligned_len) + " bytes at offset " +
                      std::to_string(p.aligned_off) + " failed: " + std::strerror(static_cast<int>(-res));
      continue;
    }
    uint8_t* b = buf(cpl.slot);
    if (static_cast<uint64_t>(res) < p.skip + p.n) {
      ++c.short_reads;
      if (!finish_with_pread(p, b, static_cast<uint64_t>(res))) continue;
    }
    record_latency(sl.t0);
    if (first_error.empty()) deliver(p, b, direct);
  }
  if (!first_error.empty()) return Error{first_error};
  return ok();
}

Result<void> NvmeReader::Impl::probe() {
  auto use_pool = [&](std::string why) {
    if (ring_ok) {
      io_uring_queue_exit(&ring);
      ring_ok = false;
    }
    fixed_files = false;
    backend = ReaderBackend::PreadPool;
    reason = std::move(why);
    start_pool();
    return ok();
  };
  const char* env = std::getenv("DS4_DISABLE_IO_URING");
  if (opt.disable_uring)
    return use_pool(std::string("io_uring disabled by ") +
                    (env && *env && std::strcmp(env, "0") != 0 ? "DS4_DISABLE_IO_URING" : "option"));
  int r = io_uring_queue_init(static_cast<unsigned>(opt.queue_depth), &ring, 0);
  if (r < 0)
    return use_pool(std::string("io_uring_queue_init failed: ") + std::strerror(-r) +
                    " (seccomp filter, kernel.io_uring_disabled or old kernel)");
  ring_ok = true;
  io_uring_probe* pr = io_uring_get_probe_ring(&ring);
  if (!pr) return use_pool("io_uring opcode probe unsupported (kernel < 5.6)");
  const bool has_read = io_uring_opcode_supported(pr, IORING_OP_READ);
  const bool has_read_fixed = io_uring_opcode_supported(pr, IORING_OP_READ_FIXED);
  io_uring_free_probe(pr);
  if (!has_read) return use_pool("io_uring lacks IORING_OP_READ");
  std::string notes;
  backend = ReaderBackend::Uring;
  if (opt.disable_fixed_buffers) {
    notes += "fixed buffers disabled by option; ";
  } else if (!has_read_fixed) {
    notes += "IORING_OP_READ_FIXED unsupported; ";
  } else {
    std::vector<iovec> iov(static_cast<size_t>(nbuf));
    for (int s = 0; s < nbuf; ++s) iov[static_cast<size_t>(s)] = {buf(s), opt.buffer_bytes};
    r = io_uring_register_buffers(&ring, iov.data(), static_cast<unsigned>(nbuf));
    if (r == 0) {
      backend = ReaderBackend::UringFixed;
    } else {
      notes += "registering " + std::to_string(nbuf) + " x " + format_bytes(opt.buffer_bytes) +
               " buffers failed: " + std::strerror(-r) + " (RLIMIT_MEMLOCK " +
               format_bytes(read_memory_limits().memlock_soft) + "); ";
    }
  }
  std::vector<int> fds;
  for (const File& f : files) {
    fds.push_back(f.fd_direct >= 0 ? f.fd_direct : f.fd_buffered);
    fds.push_back(f.fd_buffered);
  }
  fixed_files = io_uring_register_files(&ring, fds.data(), static_cast<unsigned>(fds.size())) == 0;
  if (!fixed_files) notes += "file registration refused; ";
  // One real read through the ring, compared with pread.
  const File& f0 = files[0];
  const uint64_t n = std::min<uint64_t>(f0.size, opt.alignment);
  if (n > 0) {
    std::vector<uint8_t> want(n);
    const int64_t w = pread_full(f0.fd_buffered, want.data(), n, 0);
    const ReaderCounters saved = c;
    bool match = false;
    std::string err;
    for (int attempt = 0; attempt < 2 && !match; ++attempt) {
      ReadRequest rq{0, 0, n};
      std::vector<uint8_t> got(n);
      Result<void> rr = run(std::span<const ReadRequest>(&rq, 1), [&](size_t, uint64_t off, const uint8_t* d, uint64_t k) {
        std::memcpy(got.data() + off, d, k);
      });
      match = rr && w == static_cast<int64_t>(n) && got == want;
      if (!rr) err = rr.error().message;
      if (!match && backend == ReaderBackend::UringFixed) {
        io_uring_unregister_buffers(&ring);
        backend = ReaderBackend::Uring;
        notes += "probe read with fixed buffers failed; ";
      } else {
        break;
      }
    }
    const uint64_t refused = c.direct_refused;  // a refusal seen by the probe read stays counted
    c = saved;
    c.direct_refused = refused;
    lat_us.clear();
    if (!match) return use_pool("io_uring probe read failed" + (err.empty() ? std::string(" (bytes differ from pread)") : ": " + err));
  }
  reason = std::string(reader_backend_name(backend)) + ": ring of " + std::to_string(opt.queue_depth) +
           ", READ" + (has_read_fixed ? "+READ_FIXED" : "") + " supported, " +
           (backend == ReaderBackend::UringFixed ? std::to_string(nbuf) + " x " + format_bytes(opt.buffer_bytes) +
                                                       " buffers registered, "
                                                 : std::string()) +
           (fixed_files ? "files registered, " : "") + notes + "probe read matched pread";
  return ok();
}

NvmeReader::NvmeReader() : impl_(std::make_unique<Impl>()) {}
NvmeReader::~NvmeReader() = default;

Result<std::unique_ptr<NvmeReader>> NvmeReader::open(const std::vector<std::string>& paths,
                                                     const ReaderOptions& opts) {
  if (paths.empty()) return Error{"nvme reader: expected at least one file, found none"};
  if (opts.queue_depth < 1 || opts.queue_depth > 4096)
    return Error{"nvme reader: queue depth expected in [1, 4096], found " + std::to_string(opts.queue_depth)};
  if (opts.alignment == 0 || (opts.alignment & (opts.alignment - 1)) != 0)
    return Error{"nvme reader: alignment expected a power of two, found " + std::to_string(opts.alignment)};
  if (opts.buffer_bytes == 0 || opts.buffer_bytes % opts.alignment != 0 || opts.buffer_bytes > (uint64_t(1) << 30))
    return Error{"nvme reader: buffer size expected a positive multiple of " + std::to_string(opts.alignment) +
                 " up to 1 GiB, found " + std::to_string(opts.buffer_bytes)};
  std::unique_ptr<NvmeReader> rd(new NvmeReader());
  Impl& m = *rd->impl_;
  m.opt = opts;
  for (const std::string& p : paths) {
    File f;
    f.path = p;
    f.fd_buffered = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd_buffered < 0) return Error{p + ": cannot open for reading: " + std::strerror(errno)};
    struct stat st {};
    if (fstat(f.fd_buffered, &st) != 0) {
      ::close(f.fd_buffered);
      return Error{p + ": fstat failed: " + std::strerror(errno)};
    }
    f.size = static_cast<uint64_t>(st.st_size);
    if (opts.direct) {
      f.fd_direct = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (f.fd_direct < 0) ++m.c.direct_refused;  // EINVAL: the filesystem has no direct I/O
    }
    f.direct = f.fd_direct >= 0;
    m.files.push_back(std::move(f));
  }
  m.nbuf = opts.queue_depth;
  const uint64_t total = static_cast<uint64_t>(m.nbuf) * opts.buffer_bytes;
  m.buffers = static_cast<uint8_t*>(std::aligned_alloc(std::max<size_t>(opts.alignment, 4096), total));
  if (!m.buffers) return Error{"nvme reader: cannot allocate " + format_bytes(total) + " of read buffers"};
  std::memset(m.buffers, 0, total);
  DS4_TRY_VOID(m.probe());
  return rd;
}

ReaderBackend NvmeReader::backend() const { return impl_->backend; }
const std::string& NvmeReader::backend_reason() const { return impl_->reason; }
uint64_t NvmeReader::file_size(int file) const { return impl_->files.at(static_cast<size_t>(file)).size; }
bool NvmeReader::file_direct(int file) const { return impl_->files.at(static_cast<size_t>(file)).direct; }

Result<void> NvmeReader::read(std::span<const ReadRequest> reqs, const ReadCallback& cb) {
  return impl_->run(reqs, cb);
}

Result<void> NvmeReader::read_into(std::span<const ReadRequest> reqs, std::span<uint8_t* const> dst) {
  DS4_CHECK(reqs.size() == dst.size());
  return impl_->run(reqs, [&](size_t i, uint64_t off, const uint8_t* d, uint64_t n) {
    std::memcpy(dst[i] + off, d, n);
  });
}

ReaderCounters NvmeReader::counters() const {
  ReaderCounters c = impl_->c;
  c.backend = reader_backend_name(impl_->backend);
  c.backend_reason = impl_->reason;
  std::vector<float> v = impl_->lat_us;
  if (!v.empty()) {
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return static_cast<double>(v[std::min(v.size() - 1, static_cast<size_t>(f * static_cast<double>(v.size())))]); };
    c.lat_p50_us = q(0.50);
    c.lat_p90_us = q(0.90);
    c.lat_p99_us = q(0.99);
    c.lat_max_us = v.back();
  }
  return c;
}

void NvmeReader::reset_counters() {
  const uint64_t refused = impl_->c.direct_refused;
  impl_->c = ReaderCounters{};
  impl_->c.direct_refused = refused;
  impl_->lat_us.clear();
}

}  // namespace ds4::staging
