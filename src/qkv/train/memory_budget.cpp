#include "qkv/train/memory_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "qkv/core/byte_size.h"
#include "qkv/core/error.h"

namespace qkv::train {

namespace {
// Floats saved by attention of `q` queries over `k` keys, per row: q and the heads' combined
// output (q x d_model each), k and v (k x d_model each), the probabilities (heads x q x k).
double attention_floats(const models::TransformerConfig& c, double q, double k) {
  const double D = static_cast<double>(c.d_model), H = static_cast<double>(c.num_heads);
  return 2 * q * D + 2 * k * D + H * q * k;
}

// Feed-forward hidden floats saved per position, in units of d_ff: ReLU's output alone (fc2 saves
// the same tensor); GELU also keeps its input, FFN dropout its own output; none when recomputed.
double ffn_widths(const models::TransformerConfig& c, bool recompute_ffn) {
  if (recompute_ffn) return 0;
  return c.activation == "relu" && c.ffn_dropout == 0.f ? 1 : 2;
}

// A self-attention + feed-forward layer over n positions: attention, two LayerNorm outputs, FFN.
double self_layer_floats(const models::TransformerConfig& c, bool recompute_ffn, double n) {
  return attention_floats(c, n, n) + 2 * n * static_cast<double>(c.d_model) +
         ffn_widths(c, recompute_ffn) * n * static_cast<double>(c.d_ff);
}

// Saved floats of one row's forward pass through the layers (the output projection excluded).
double layer_floats_per_row(const models::TransformerConfig& c, bool recompute_ffn, const StepShape& s) {
  const double L = static_cast<double>(c.num_layers), D = static_cast<double>(c.d_model);
  const double n = static_cast<double>(s.len), S = static_cast<double>(s.src_len);
  if (c.encoder_decoder()) {
    // Encoder layers, then decoder layers: self-attention, cross-attention (source-long k and v),
    // three LayerNorm outputs, FFN; plus each stack's embedding output.
    const double encoder = L * self_layer_floats(c, recompute_ffn, S) + S * D;
    const double decoder_layer = attention_floats(c, n, n) + attention_floats(c, n, S) + 3 * n * D +
                                 ffn_widths(c, recompute_ffn) * n * static_cast<double>(c.d_ff);
    return encoder + L * decoder_layer + n * D;
  }
  // Decoder-only (pre-LN: the final LayerNorm's output) or encoder-only (embedding LayerNorm and dropout).
  const double extra = c.decoder_only() ? n * D : 2 * n * D;
  return L * self_layer_floats(c, recompute_ffn, n) + extra;
}

// Gradients alive at once in backward, per row: one attention's probability and score gradients,
// a few d_model-wide gradients and one FFN hidden gradient.
double transient_floats_per_row(const models::TransformerConfig& c, const StepShape& s) {
  const double n = static_cast<double>(s.len), keys = static_cast<double>(std::max(s.len, s.src_len));
  return 2 * static_cast<double>(c.num_heads) * n * keys + 4 * n * static_cast<double>(c.d_model) +
         n * static_cast<double>(c.d_ff);
}

// The output projection's floats for `rows` of the batch: its logits (whose gradient reuses their
// buffer) and, for a head on chosen positions (masked LM), the gathered rows, dense and LayerNorm.
double output_floats(const models::TransformerConfig& c, const StepShape& s, int64_t rows) {
  const double share = s.rows > 0 ? static_cast<double>(rows) / static_cast<double>(s.rows) : 1.0;
  const double outputs = std::ceil(static_cast<double>(s.outputs) * share);
  const double head = c.encoder_only() ? 3 * static_cast<double>(c.d_model) : 0;
  return outputs * (static_cast<double>(s.output_width) + head);
}
}  // namespace

MemoryEstimate estimate_step_memory(const models::TransformerConfig& c, int64_t parameters, bool recompute_ffn,
                                    const StepShape& s, int64_t rows) {
  const int64_t r = std::clamp<int64_t>(rows, 0, s.rows);
  const bool chunked = r < s.rows;
  MemoryEstimate e;
  e.state_bytes = parameters * 4 * (chunked ? 5 : 4);
  const double per_row = layer_floats_per_row(c, recompute_ffn, s) + transient_floats_per_row(c, s);
  e.activation_bytes = static_cast<int64_t>(4 * (per_row * static_cast<double>(r) + output_floats(c, s, r)));
  return e;
}

int64_t memory_budget_bytes(int64_t max_memory, int64_t parameters) {
  if (max_memory != kAutoMemory) return max_memory;
  // The state of a chunked step (20 bytes a parameter), the process, and the activations allowed.
  return parameters * 20 + kProcessOverheadBytes + kAutoActivationBytes;
}

int64_t max_memory_on_gpu(int64_t max_memory, int64_t device_total_bytes, int ranks_on_device) {
  if (max_memory != kAutoMemory) return max_memory;
  const double share = static_cast<double>(device_total_bytes) * kGpuAutoFraction / std::max(1, ranks_on_device);
  return std::max<int64_t>(1, static_cast<int64_t>(share));
}

int ranks_on_same_gpu(const std::vector<RankPlacement>& placements, int rank) {
  const RankPlacement& mine = placements.at(static_cast<size_t>(rank));
  if (mine.device < 0) return 1;
  return static_cast<int>(std::count_if(placements.begin(), placements.end(), [&](const RankPlacement& p) {
    return p.host == mine.host && p.device == mine.device;
  }));
}

void check_gpu_per_rank(const std::vector<RankPlacement>& placements) {
  for (size_t r = 0; r < placements.size(); ++r) {
    const RankPlacement& p = placements[r];
    QKV_CHECK(p.device >= 0, "--allreduce nccl: rank " << r << " trains on the CPU; NCCL sums gradients on GPUs "
                                                        << "(--device cuda)");
    for (size_t other = 0; other < r; ++other)
      QKV_CHECK(placements[other].host != p.host || placements[other].device != p.device,
                "--allreduce nccl: ranks " << other << " and " << r << " share GPU cuda:" << p.device
                                           << " of one host, and NCCL needs a GPU per rank; start at most as many "
                                              "ranks a host as it has GPUs, or use --allreduce mpi");
  }
}

MicroBatchPlan plan_micro_batches(const models::TransformerConfig& c, int64_t parameters, bool recompute_ffn,
                                  const StepShape& s, int64_t max_memory) {
  MicroBatchPlan p;
  p.budget_bytes = memory_budget_bytes(max_memory, parameters);
  p.estimate = estimate_step_memory(c, parameters, recompute_ffn, s, s.rows);
  p.largest_fitting = s.rows;
  if (p.budget_bytes <= 0 || p.estimate.total() <= p.budget_bytes || s.rows <= 1) return p;
  // The estimate grows with the rows: bisect for the most that fit.
  int64_t lo = 0, hi = s.rows - 1;  // lo fits (0 trivially), hi + 1 does not
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (estimate_step_memory(c, parameters, recompute_ffn, s, mid).total() <= p.budget_bytes) lo = mid;
    else hi = mid - 1;
  }
  p.largest_fitting = lo;
  p.fits = lo > 0;
  const int64_t most = std::max<int64_t>(lo, 1);
  p.chunks = (s.rows + most - 1) / most;
  p.rows = (s.rows + p.chunks - 1) / p.chunks;  // as even as the chunk count allows, never above `most`
  p.estimate = estimate_step_memory(c, parameters, recompute_ffn, s, p.rows);
  return p;
}

int64_t parse_memory_size(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Error("--max-memory: '" + text + "' " + why +
                 " (expected auto, 0 for no limit, or a size such as 2G, 1500M or 512MiB)");
  };
  if (text == "auto") return kAutoMemory;
  int64_t bytes = 0;
  try {
    bytes = parse_byte_size(text);
  } catch (const Error& e) {
    throw bad(e.what());
  }
  if (bytes > 0 && bytes < 1 << 20) throw bad("is below 1M, too little to train anything");
  return bytes;
}

std::string format_memory_size(int64_t max_memory) {
  if (max_memory == 0) return "no limit";
  if (max_memory == kAutoMemory) return "auto";
  char buf[32];
  const double b = static_cast<double>(max_memory);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1fG", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0fM", b / (1024.0 * 1024));
  return buf;
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace qkv::train
