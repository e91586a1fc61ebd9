#include "qkv/serve/metrics.h"

#include <sstream>

namespace qkv::serve {

namespace {
const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const std::vector<double> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128};

// A label value with Prometheus' escapes (backslash, quote, newline).
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void render_histogram(std::ostringstream& os, const std::string& name, const std::string& label,
                      const std::string& value, const auto& h) {
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    os << name << "_bucket{" << label << "=\"" << escape(value) << "\",le=\"" << h.bounds[i] << "\"} " << cumulative
       << "\n";
  }
  os << name << "_bucket{" << label << "=\"" << escape(value) << "\",le=\"+Inf\"} " << h.count << "\n";
  os << name << "_sum{" << label << "=\"" << escape(value) << "\"} " << h.sum << "\n";
  os << name << "_count{" << label << "=\"" << escape(value) << "\"} " << h.count << "\n";
}
}  // namespace

void Metrics::Histogram::observe(double x) {
  size_t i = 0;
  while (i < bounds.size() && x > bounds[i]) ++i;
  counts[i] += 1;
  sum += x;
  count += 1;
}

Metrics::Histogram Metrics::make(std::vector<double> bounds) {
  Histogram h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void Metrics::request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_[{route, status}] += 1;
  auto it = latency_.try_emplace(route, make(kLatencyBounds)).first;
  it->second.observe(seconds);
}

void Metrics::time_to_first_token(const std::string& model, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  first_token_.try_emplace(model, make(kLatencyBounds)).first->second.observe(seconds);
}

void Metrics::batch(const std::string& model, int64_t requests, int64_t inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_requests_.try_emplace(model, make(kBatchBounds)).first->second.observe(static_cast<double>(requests));
  batches_[model] += 1;
  batch_inputs_[model] += inputs;
}

void Metrics::tokens(const std::string& model, int64_t in, int64_t out) {
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_in_[model] += in;
  tokens_out_[model] += out;
}

void Metrics::preemptions(const std::string& model, int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  preemptions_[model] += n;
}

void Metrics::gauge(const std::string& name, const std::string& help,
                    std::function<std::vector<std::pair<std::string, double>>()> read, const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  gauges_.push_back({name, help, label, std::move(read)});
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  os << "# HELP qkv_requests_total Requests answered, by route and HTTP status.\n# TYPE qkv_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    os << "qkv_requests_total{route=\"" << escape(key.first) << "\",status=\"" << key.second << "\"} " << n << "\n";
  os << "# HELP qkv_request_duration_seconds Time from a request's arrival to its answer.\n"
        "# TYPE qkv_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_) render_histogram(os, "qkv_request_duration_seconds", "route", route, h);
  os << "# HELP qkv_time_to_first_token_seconds Time from a streamed completion's arrival to its first piece.\n"
        "# TYPE qkv_time_to_first_token_seconds histogram\n";
  for (const auto& [model, h] : first_token_) render_histogram(os, "qkv_time_to_first_token_seconds", "model", model, h);
  os << "# HELP qkv_batch_requests Requests in each batch the engine ran (a decoder-only model: in each generation step).\n# TYPE qkv_batch_requests histogram\n";
  for (const auto& [model, h] : batch_requests_) render_histogram(os, "qkv_batch_requests", "model", model, h);
  const auto counter = [&](const char* name, const char* help, const std::map<std::string, int64_t>& m) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n";
    for (const auto& [model, n] : m) os << name << "{model=\"" << escape(model) << "\"} " << n << "\n";
  };
  counter("qkv_batches_total", "Batches the engine ran (a decoder-only model: generation steps).", batches_);
  counter("qkv_batch_inputs_total", "Inputs (sentences; completion rows) in those batches.", batch_inputs_);
  counter("qkv_input_tokens_total", "Tokens read: prompts and sentences.", tokens_in_);
  counter("qkv_output_tokens_total", "Tokens written: completions and translations.", tokens_out_);
  counter("qkv_preemptions_total",
          "Times a decoder-only model's running completions were preempted for want of memory (then prefilled again).",
          preemptions_);
  for (const Gauge& g : gauges_) {
    os << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " gauge\n";
    for (const auto& [value, v] : g.read()) os << g.name << "{" << g.label << "=\"" << escape(value) << "\"} " << v << "\n";
  }
  return os.str();
}

}  // namespace qkv::serve
