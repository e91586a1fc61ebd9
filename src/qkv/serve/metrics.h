// The numbers `GET /metrics` serves, in Prometheus' text format: requests by route and status,
// latency and time-to-first-token histograms, queue lengths, batch sizes, tokens in and out.
// Thread-safe; the engine and the HTTP layer record, the scraper renders.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace qkv::serve {

class Metrics {
 public:
  void request(const std::string& route, int status, double seconds);
  void time_to_first_token(const std::string& model, double seconds);
  void batch(const std::string& model, int64_t requests, int64_t inputs);
  void tokens(const std::string& model, int64_t in, int64_t out);
  // A decoder-only model's running batch preempted for want of memory (its rows prefilled again).
  void preemptions(const std::string& model, int64_t n);
  // A gauge read at each render (queue lengths): (label value, number) pairs, the label `label`.
  void gauge(const std::string& name, const std::string& help, std::function<std::vector<std::pair<std::string, double>>()> read,
             const std::string& label = "model");
  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bound, then +Inf
    double sum = 0;
    int64_t count = 0;
    void observe(double x);
  };
  static Histogram make(std::vector<double> bounds);

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, Histogram> latency_, first_token_, batch_requests_;
  std::map<std::string, int64_t> tokens_in_, tokens_out_, batches_, batch_inputs_, preemptions_;
  struct Gauge {
    std::string name, help, label;
    std::function<std::vector<std::pair<std::string, double>>()> read;
  };
  std::vector<Gauge> gauges_;
};

}  // namespace qkv::serve
