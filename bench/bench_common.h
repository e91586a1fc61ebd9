// Timing helpers for benchmarks: medians over repeated runs (the machine is shared and noisy).
#pragma once
#include <cblas.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/cpu_features.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/product_clock.h"
#include "qkv/kernels/wide_tile.h"
#include "qkv/ops/precision.h"

namespace qkv::bench {

// The median of the measurements; a benchmark that measured nothing fails here (exit status 1 from
// the benchmarks' handlers, an abort elsewhere) rather than printing a number read past the end.
inline double median(std::vector<double> v) {
  if (v.empty()) throw std::runtime_error("no measurements: the benchmark timed nothing");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// This process's peak resident memory so far, in GB (ru_maxrss is in KiB on Linux).
inline double peak_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss * 1024.0 / 1e9;
}

template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up: fills the buffer pool and BLAS buffers
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return median(std::move(t));
}

// The SGEMM ceiling on this machine now, GFLOP/s: OpenBLAS's C = A B^T (the nn.Linear layout) at
// one large shape, median of 5 after a warm-up. The benchmarks print it beside their figures,
// since this shared machine's speed moves between runs.
inline double sgemm_ceiling_gflops(int64_t M = 2048, int64_t N = 2048, int64_t K = 512) {
  std::vector<float> a(static_cast<size_t>(M * K), 1.f), b(static_cast<size_t>(N * K), 1.f), c(static_cast<size_t>(M * N));
  const double t = median_seconds(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.f, a.data(), static_cast<int>(K), b.data(), static_cast<int>(K), 0.f, c.data(), static_cast<int>(N));
  });
  return 2.0 * static_cast<double>(M * N * K) / t * 1e-9;
}

// The same product through qkv's own training GEMM (kernels::gemm_blocked), which the steps use.
inline double qkv_gemm_ceiling_gflops(int64_t M = 2048, int64_t N = 2048, int64_t K = 512) {
  std::vector<float> a(static_cast<size_t>(M * K), 1.f), b(static_cast<size_t>(N * K), 1.f), c(static_cast<size_t>(M * N));
  const double t = median_seconds(5, [&] {
    kernels::gemm_blocked(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
  });
  return 2.0 * static_cast<double>(M * N * K) / t * 1e-9;
}

// The same with bf16 operands (kernels::gemm_bf16: vdpbf16ps where the CPU has it).
inline double qkv_bf16_gemm_ceiling_gflops(int64_t M = 2048, int64_t N = 2048, int64_t K = 512) {
  std::vector<float> a(static_cast<size_t>(M * K), 1.f), b(static_cast<size_t>(N * K), 1.f), c(static_cast<size_t>(M * N));
  const double t = median_seconds(5, [&] {
    kernels::gemm_bf16(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
  });
  return 2.0 * static_cast<double>(M * N * K) / t * 1e-9;
}

// The training benchmarks' shared parts (bench_train_step, bench_lm_train): where the peers'
// scripts are, the device both sides train on (--device), the peer's flags for it and for
// --precision, and the lines that differ between the CPU and a GPU.
#ifdef QKV_BENCH_DIR
// bench/ of the source tree ($QKV_BENCH_DIR when the binary runs from another copy, as on a GPU machine).
inline std::string bench_dir() {
  const char* dir = std::getenv("QKV_BENCH_DIR");
  return dir && *dir ? dir : QKV_BENCH_DIR;
}
#endif

// "CPU: <model>; kernels: <ISA>; float32 tile: <tile>[; bf16 products: <kernel>]", the training
// benchmarks' first line.
inline void print_cpu_line(bool bf16) {
  std::printf("CPU: %s; kernels: %s; float32 tile: %s%s\n", cpu_features().description().c_str(),
              kernels::isa_description().c_str(), kernels::wide_tile::description().c_str(),
              bf16 ? ("; bf16 products: " + ops::bf16_product_kernel()).c_str() : "");
}

// --device's value; a GPU is checked here, before any model is built, so that a machine without one
// stops with qkv's message ("no CUDA GPU is visible ...").
inline Device training_device(const std::string& name) {
  const Device device = parse_device(name);
  if (device.is_cuda()) cuda::check_available(device);
  return device;
}

// The peer script's flags for qkv's device and precision: " --device cpu|cuda[ --autocast bf16]"
// (bf16: torch.autocast on that device).
inline std::string peer_device_flags(Device device, bool bf16) {
  return std::string(" --device ") + (device.is_cuda() ? "cuda" : "cpu") + (bf16 ? " --autocast bf16" : "");
}

// qkv's matmul rate: on a GPU beside the device and its tensor pool's peak; on the CPU against the
// SGEMM ceiling and qkv's own GEMM (float32 or bf16) at M x N x K, measured now.
inline void print_qkv_rate(double gflops, Device device, double pool_peak_bytes, bool bf16, int64_t M = 2048,
                           int64_t N = 2048, int64_t K = 512) {
  if (device.is_cuda()) {
    std::printf("qkv     %.0f GFLOP/s of matmul work on %s (%s); GPU tensor pool peak %.2f GB\n", gflops,
                device.name().c_str(), cuda::describe(device).c_str(), pool_peak_bytes / 1e9);
    return;
  }
  const double ceiling = sgemm_ceiling_gflops(M, N, K);
  const double own_ceiling = bf16 ? qkv_bf16_gemm_ceiling_gflops(M, N, K) : qkv_gemm_ceiling_gflops(M, N, K);
  std::printf("qkv     %.0f GFLOP/s of matmul work = %.2f of the SGEMM ceiling (OpenBLAS, %.0f GFLOP/s measured now); "
              "%.2f of qkv's own %s GEMM at that shape (%.0f GFLOP/s)\n",
              gflops, gflops / ceiling, ceiling, gflops / own_ceiling, bf16 ? "bf16" : "float32", own_ceiling);
}

// On a GPU, both sides' peaks there: qkv's tensor pool and PyTorch's allocator (the peer's
// "gpu_peak_bytes", torch.cuda.max_memory_allocated).
inline void print_gpu_memory(Device device, double pool_peak_bytes, const nlohmann::json& peer) {
  if (device.is_cuda() && peer.contains("gpu_peak_bytes"))
    std::printf("memory  GPU peak: qkv's tensor pool %.2f GB, PyTorch's allocator %.2f GB\n", pool_peak_bytes / 1e9,
                peer["gpu_peak_bytes"].get<double>() / 1e9);
}

// A pause between one side's step and the other's: a runtime's idle threads keep spinning on the
// cores after a parallel region, for up to 200 ms in Intel's OpenMP (KMP_BLOCKTIME, CTranslate2's
// wheel). Without it qkv's embedding runs took 7.85 s right after the peers' instead of 7.34 s.
inline void settle() { usleep(300 * 1000); }

// A peer's benchmark script started with --serve (bench/step_protocol.py): it sets up, takes its
// warm-up step and says {"ready": true}; then step() asks it for one timed step and returns its
// answer ({"seconds", "loss"}), and finish() ends it and returns its last JSON line (peak RSS and
// the rest). Alternating qkv's steps with the peer's makes a drift in the shared machine's speed
// reach both sides alike: timed one after the other, minutes apart, the same qkv step measured
// 1.90 s in one run and 2.14 s in the next.
class PeerProcess {
 public:
  explicit PeerProcess(const std::string& command) : command_(command) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]), close(from_child[1]);
    in_ = fdopen(to_child[1], "w"), out_ = fdopen(from_child[0], "r");
    const nlohmann::json ready = read_json();
    if (!ready.value("ready", false)) fail("expected {\"ready\": true}, got " + ready.dump());
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (in_) std::fclose(in_);
    if (out_) std::fclose(out_);
  }

  // One timed step of the peer, then a pause (settle()) before whatever runs next.
  nlohmann::json step() {
    send("step");
    nlohmann::json answer = read_json();
    settle();
    return answer;
  }

  nlohmann::json finish() {
    send("done");
    nlohmann::json last = read_json();
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("exited with status " + std::to_string(status));
    return last;
  }

 private:
  void send(const char* line) {
    if (std::fprintf(in_, "%s\n", line) < 0 || std::fflush(in_) != 0) fail("cannot write to it");
  }
  // The next line that is a JSON object (anything else the script prints is skipped).
  nlohmann::json read_json() {
    char buf[1 << 16];
    while (std::fgets(buf, sizeof buf, out_)) {
      if (buf[0] != '{') continue;
      try {
        return nlohmann::json::parse(buf);
      } catch (const nlohmann::json::exception& e) {
        fail(std::string("unparsable line (") + e.what() + "): " + buf);
      }
    }
    fail("ended without answering (run bench/setup_peers.sh first?)");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("peer benchmark `" + command_ + "`: " + what);
  }

  std::string command_;
  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

// qkv's step and the peer's, alternately, `steps` times each (both warmed up before); the peer may
// be null (qkv alone). Seconds of each step, and the share of each of qkv's steps spent in the CPU's
// matrix products (kernels/product_clock.h).
// With products_by_shape, also each distinct product's totals over the steps (the clock's by-shape
// mode, whose lock costs a little of the step: a diagnostic, not for the ratios).
struct PairedTimes {
  std::vector<double> qkv, peer, qkv_product_share;
  std::vector<kernels::product_clock::ShapeTotal> products;
};

template <class F>
PairedTimes interleaved_steps(int steps, F&& qkv_step, PeerProcess* peer, bool products_by_shape = false) {
  PairedTimes t;
  kernels::product_clock::set_enabled(true, products_by_shape);
  for (int i = 0; i < steps; ++i) {
    kernels::product_clock::reset();
    const auto a = std::chrono::steady_clock::now();
    qkv_step();
    t.qkv.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    t.qkv_product_share.push_back(kernels::product_clock::seconds() / t.qkv.back());
    if (products_by_shape)
      for (const auto& s : kernels::product_clock::by_shape())
        kernels::product_clock::add_to(t.products, s.shape, s.calls, s.seconds);
    if (!peer) continue;
    settle();
    t.peer.push_back(peer->step().at("seconds").get<double>());
  }
  return t;
}

// "peer / qkv per pair of steps: median 1.32x (1.25x-1.41x)": how much the speed-up moved within
// the run.
inline std::string pair_ratios(const PairedTimes& t) {
  std::vector<double> r;
  for (size_t i = 0; i < t.qkv.size() && i < t.peer.size(); ++i) r.push_back(t.peer[i] / t.qkv[i]);
  if (r.empty()) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "per pair of steps: median %.2fx (%.2fx-%.2fx over %zu pairs)", median(r),
                *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()), r.size());
  return buf;
}

// "qkv     matrix products 74% of the step (...)": the share of a CPU step that the GEMM kernels
// take (median over the steps), what faster matrix units can shrink; nothing on a GPU, whose
// kernels run after the host's calls return.
inline void print_product_share(const PairedTimes& t, Device device) {
  if (device.is_cuda() || t.qkv_product_share.empty()) return;
  std::printf("qkv     matrix products %.0f%% of the step (median of %zu; the GEMM kernels' time, attention's "
              "included; the rest: softmax, norms, activations, loss, optimizer, copies)\n",
              100 * median(t.qkv_product_share), t.qkv_product_share.size());
}

// The products of a step by shape, the most time first (`top` of them, then the rest in one line):
// calls and milliseconds a step, the rate, the share of the products' time. bench_gemm times the
// same shapes alone: a product slower here than there loses time to the step around it.
inline void print_products_by_shape(const PairedTimes& t, int top = 40) {
  if (t.products.empty() || t.qkv.empty()) return;
  auto totals = t.products;
  std::sort(totals.begin(), totals.end(), [](const auto& x, const auto& y) { return x.seconds > y.seconds; });
  double all = 0, all_flops = 0;
  for (const auto& s : totals) all += s.seconds, all_flops += s.flops();
  const double steps = static_cast<double>(t.qkv.size());
  std::printf("qkv     products by shape, a step (mean of %zu; %.0f ms, %.0f GFLOP/s over all of them):\n",
              t.qkv.size(), all / steps * 1e3, all_flops / all * 1e-9);
  std::printf("          type  op(A) op(B)      M x      N x      K   calls      ms   GFLOP/s  share\n");
  double rest = 0, rest_flops = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    const auto& s = totals[i];
    if (static_cast<int>(i) >= top) {
      rest += s.seconds, rest_flops += s.flops(), rest_calls += s.calls;
      continue;
    }
    std::printf("          %-5s %-5s %-5s %8lld x %6lld x %6lld %7.0f %7.1f %9.1f %5.1f%%\n", s.shape.type,
                s.shape.trans_a ? "A^T" : "A", s.shape.trans_b ? "B^T" : "B", static_cast<long long>(s.shape.M),
                static_cast<long long>(s.shape.N), static_cast<long long>(s.shape.K), s.calls / steps,
                s.seconds / steps * 1e3, s.flops() / s.seconds * 1e-9, 100 * s.seconds / all);
  }
  if (rest > 0)
    std::printf("          %zu other shapes %35.0f %7.1f %9.1f %5.1f%%\n", totals.size() - top, rest_calls / steps,
                rest / steps * 1e3, rest_flops / rest * 1e-9, 100 * rest / all);
}

}  // namespace qkv::bench
