// qkv serve --model NAME=DIR [--model NAME=DIR ...] [--host 127.0.0.1] [--port 8080] [--api-key KEY]
//
// Every family behind one HTTP server (cpp-httplib), in the shapes of OpenAI's API where it has one:
//   POST /v1/completions      decoder-only models (stream: server-sent events)
//   POST /v1/embeddings       encoder-only models
//   POST /v1/translations     encoder-decoder models
//   POST /v1/score            log-probabilities of texts (decoder-only and encoder-decoder models)
//   POST /v1/classifications  encoder-only models with a classification head
//   GET  /v1/models, /health (503 while loading), /metrics (Prometheus)
// Errors are OpenAI's {"error": {...}} with the status that says what went wrong. The HTTP threads
// parse and queue; each model's worker batches the requests that arrive together
// (serve/engine.h). SIGINT or SIGTERM stops accepting, finishes what is in flight (at most
// --drain-timeout) and exits 0.
#include <httplib.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "qkv/cli/commands.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/validators.h"
#include "qkv/core/buffer_pool.h"
#include "qkv/core/byte_size.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/core/error.h"
#include "qkv/core/threads.h"
#include "qkv/serve/engine.h"

namespace qkv::cli {

namespace {

using Clock = std::chrono::steady_clock;
using serve::HttpError;

struct ServeCliOptions {
  std::vector<std::string> models;  // NAME=DIR
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string port_file;
  std::string api_key, api_key_file;
  int64_t max_body_bytes = 1 << 20;
  int64_t max_input_tokens = 0;
  int64_t max_queue = 64;
  int64_t max_inputs = 256;
  double request_timeout = 120;
  int64_t max_batch_tokens = 4096;
  double batch_wait_ms = 10;
  int64_t batch_size = 32;
  int64_t max_concurrent_sequences = 16;
  int http_threads = 32;
  double drain_timeout = 30;
  int threads = 0;
  std::string max_memory = "0";  // the device pool's limit (BufferPool::set_memory_limit)
  bool quiet = false;  // no log lines (listening, loaded, ready, stopped); errors still
  ComputeTypeOption compute;
};

// What the routes share.
struct ServerState {
  std::map<std::string, std::unique_ptr<serve::ModelSlot>> models;
  std::vector<std::string> order;  // as given
  std::atomic<bool> ready{false};
  Device device = Device::cpu();  // where the models run (/health asks it for a fault)
  std::string api_key;
  serve::Metrics metrics;
  serve::RequestLimits limits;
  int64_t created = 0;
};

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(serve::error_body(e), "application/json");
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
}

// Compares in a time that does not depend on where the strings differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void authorize(const ServerState& st, const httplib::Request& req) {
  if (st.api_key.empty()) return;
  const std::string given = req.get_header_value("Authorization");
  if (!same_secret(given, "Bearer " + st.api_key))
    throw HttpError(401, "authentication_error",
                    given.empty() ? "this server needs an API key: Authorization: Bearer KEY"
                                  : "the API key in the Authorization header is not this server's",
                    "", "invalid_api_key");
}

serve::ModelSlot& model_named(ServerState& st, const std::string& name) {
  const auto it = st.models.find(name);
  if (it == st.models.end()) {
    std::string loaded;
    for (const std::string& n : st.order) loaded += (loaded.empty() ? "" : ", ") + n;
    throw HttpError(404, "invalid_request_error", "model '" + name + "' is not served here; models: " + loaded,
                    "model", "model_not_found");
  }
  return *it->second;
}

// A route: authorisation, readiness, the answer or an error body, and the request's metrics.
template <class F>
httplib::Server::Handler route(ServerState& st, std::string name, F answer, bool needs_key = true) {
  return [&st, name, answer, needs_key](const httplib::Request& req, httplib::Response& res) {
    const auto start = Clock::now();
    try {
      if (needs_key) authorize(st, req);
      if (!st.ready) {
        HttpError e(503, "server_error", "the models are still loading", "", "loading");
        e.retry_after = 1;
        throw e;
      }
      res.status = 200;
      answer(req, res);
    } catch (const std::exception& e) {
      send_error(res, serve::http_error_of(e));
    }
    st.metrics.request(name, res.status, std::chrono::duration<double>(Clock::now() - start).count());
  };
}

void add_routes(httplib::Server& svr, ServerState& st) {
  svr.Get("/health", [&st](const httplib::Request&, httplib::Response& res) {
    // A GPU that keeps a fault fails every request from then on: unhealthy, so that a supervisor
    // restarts the server rather than sending it more work.
    const std::string fault = st.ready ? cuda::device_fault(st.device) : std::string();
    res.status = st.ready && fault.empty() ? 200 : 503;
    const nlohmann::json body = !st.ready     ? nlohmann::json{{"status", "loading"}}
                                : fault.empty() ? nlohmann::json{{"status", "ok"}}
                                                : nlohmann::json{{"status", "error"},
                                                                 {"error", fault + " (the GPU fails every call of this "
                                                                               "process from now on: restart the server)"}};
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
  });
  svr.Get("/metrics", route(st, "/metrics", [&st](const httplib::Request&, httplib::Response& res) {
            res.set_content(st.metrics.render(), "text/plain; version=0.0.4");
          }));
  svr.Get("/v1/models", route(st, "/v1/models", [&st](const httplib::Request&, httplib::Response& res) {
            nlohmann::json data = nlohmann::json::array();
            for (const std::string& n : st.order)
              data.push_back({{"id", n}, {"object", "model"}, {"created", st.created}, {"owned_by", "qkv"},
                              {"family", serve::family_name(st.models.at(n)->family())}});
            res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
          }));
  svr.Post("/v1/completions", route(st, "/v1/completions", [&st](const httplib::Request& req, httplib::Response& res) {
             const serve::CompletionRequest r = serve::parse_completion(req.body, st.limits);
             serve::ModelSlot& slot = model_named(st, r.model);
             if (!r.stream) {
               res.set_content(slot.complete(r), "application/json");
               return;
             }
             // Queued (or refused) now, so that an error still has its status; streamed by the
             // HTTP thread that writes the response.
             auto stream = slot.start_streaming(r);
             res.set_chunked_content_provider("text/event-stream", [stream](size_t, httplib::DataSink& sink) {
               stream([&sink](const std::string& chunk) { return sink.write(chunk.data(), chunk.size()); });
               sink.done();
               return true;
             });
           }));
  svr.Post("/v1/embeddings", route(st, "/v1/embeddings", [&st](const httplib::Request& req, httplib::Response& res) {
             const serve::EmbeddingRequest r = serve::parse_embedding(req.body, st.limits);
             res.set_content(model_named(st, r.model).embed(r), "application/json");
           }));
  svr.Post("/v1/translations", route(st, "/v1/translations", [&st](const httplib::Request& req, httplib::Response& res) {
             const serve::TranslationRequest r = serve::parse_translation(req.body, st.limits);
             res.set_content(model_named(st, r.model).translate(r), "application/json");
           }));
  svr.Post("/v1/classifications",
           route(st, "/v1/classifications", [&st](const httplib::Request& req, httplib::Response& res) {
             const serve::ClassificationRequest r = serve::parse_classification(req.body, st.limits);
             res.set_content(model_named(st, r.model).classify(r), "application/json");
           }));
  svr.Post("/v1/score", route(st, "/v1/score", [&st](const httplib::Request& req, httplib::Response& res) {
             const serve::ScoreRequest r = serve::parse_score(req.body, st.limits);
             res.set_content(model_named(st, r.model).score(r), "application/json");
           }));
  // Errors httplib answers itself (no route, a body over --max-body-bytes) get the same shape.
  svr.set_error_handler([&st](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, HttpError(404, "not_found_error", "no route " + req.method + " " + req.path, "", "unknown_route"));
    else if (res.status == 413)
      send_error(res, HttpError(413, "invalid_request_error", "the request body is larger than --max-body-bytes", "",
                                "body_too_large"));
    else
      send_error(res, HttpError(res.status, "invalid_request_error", "the request was refused (HTTP " +
                                                                         std::to_string(res.status) + ")"));
    st.metrics.request(req.path, res.status, 0);
  });
}

std::pair<std::string, std::string> name_and_dir(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw UsageError("--model " + spec + ": expected NAME=DIR (the name clients give as \"model\")");
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

std::string read_key_file(const std::string& path) {
  std::ifstream in(path);
  QKV_CHECK(in, path << ": cannot read the API key file (--api-key-file)");
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  QKV_CHECK(!key.empty(), path << ": the API key file's first line is empty");
  return key;
}

serve::ServeOptions engine_options(const ServeCliOptions& o) {
  serve::ServeOptions so;
  so.max_queue = o.max_queue;
  so.max_batch_tokens = o.max_batch_tokens;
  so.batch_wait = std::chrono::microseconds(static_cast<int64_t>(o.batch_wait_ms * 1000));
  so.max_input_tokens = o.max_input_tokens;
  so.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout * 1000));
  so.batch_size = o.batch_size;
  so.max_concurrent_sequences = o.max_concurrent_sequences;
  so.compute_type = chosen_compute_type(o.compute);
  so.device = chosen_device(o.compute.device);
  return so;
}

int run_serve(const ServeCliOptions& o) {
  // SIGINT and SIGTERM go to one thread (sigwait below), not to whichever thread runs: blocked first,
  // before any thread starts, so that every thread inherits the mask. That includes the threads the
  // CUDA runtime starts when --device cuda is resolved: a SIGTERM delivered to one of those ended the
  // process at once instead of draining it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  set_num_threads(o.threads);
  ServerState st;
  st.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  QKV_CHECK(o.api_key.empty() || o.api_key_file.empty(), "give --api-key or --api-key-file, not both");
  st.api_key = o.api_key_file.empty() ? o.api_key : read_key_file(o.api_key_file);
  st.limits.max_inputs = o.max_inputs;
  std::vector<std::pair<std::string, std::string>> specs;
  for (const std::string& m : o.models) {
    specs.push_back(name_and_dir(m));
    for (size_t i = 0; i + 1 < specs.size(); ++i)
      if (specs[i].first == specs.back().first) throw UsageError("--model: the name '" + specs.back().first + "' is given twice");
    check_checkpoint_argument(specs.back().second);
  }
  const serve::ServeOptions so = engine_options(o);
  st.device = so.device;
  // Weights, caches and each step's buffers together; a request that would pass it gets 503.
  BufferPool::set_memory_limit(parse_byte_size(o.max_memory), so.device);

  httplib::Server svr;
  const int http_threads = o.http_threads;
  svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(static_cast<size_t>(http_threads)); };
  svr.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  add_routes(svr, st);
  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  QKV_CHECK(port > 0, "cannot listen on " << o.host << ":" << o.port << " (in use, or not an address of this machine)");
  std::thread listener([&svr] { svr.listen_after_bind(); });
  // httplib's stop() is lost when it comes before the listening loop has started: wait for it.
  const auto stop_server = [&svr] {
    for (int i = 0; i < 5000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    svr.stop();
  };

  std::atomic<bool> stop_requested{false};
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stop_requested.exchange(true)) return;  // stop() below woke us
    if (!o.quiet) std::fprintf(stderr, "qkv serve: %s: no new connections; finishing the requests in flight (at most %.0f s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", o.drain_timeout);
    stop_server();
  });
  const auto stop_models = [&] {
    bool drained = true;
    for (const std::string& n : st.order)
      drained = st.models.at(n)->stop(std::chrono::milliseconds(static_cast<int64_t>(o.drain_timeout * 1000))) && drained;
    return drained;
  };
  if (!o.quiet) std::fprintf(stderr, "qkv serve: listening on http://%s:%d (GET /health answers 503 until the models are loaded)\n",
               o.host.c_str(), port);
  if (!o.port_file.empty()) std::ofstream(o.port_file) << port << "\n";
  try {
    for (const auto& [name, dir] : specs) {
      const auto start = Clock::now();
      auto slot = std::make_unique<serve::ModelSlot>(name, dir, so, st.metrics);
      if (!o.quiet) std::fprintf(stderr, "qkv serve: model '%s': %s (%s) loaded in %.1f s\n", name.c_str(), dir.c_str(),
                   serve::family_name(slot->family()), std::chrono::duration<double>(Clock::now() - start).count());
      st.models.emplace(name, std::move(slot));
      st.order.push_back(name);
    }
  } catch (...) {  // a model that does not load: stop the server, then report it
    stop_requested = true;
    stop_server();
    pthread_kill(signal_waiter.native_handle(), SIGTERM);
    listener.join();
    signal_waiter.join();
    stop_models();
    throw;
  }
  st.metrics.gauge("qkv_queue_length", "Requests waiting for each model's worker.", [&st] {
    std::vector<std::pair<std::string, double>> out;
    for (const std::string& n : st.order) out.emplace_back(n, static_cast<double>(st.models.at(n)->queue_length()));
    return out;
  });
  st.metrics.gauge("qkv_running_sequences", "Completion rows each decoder-only model is generating (continuous batching).",
                   [&st] {
                     std::vector<std::pair<std::string, double>> out;
                     for (const std::string& n : st.order)
                       if (st.models.at(n)->family() == serve::Family::DecoderOnly)
                         out.emplace_back(n, static_cast<double>(st.models.at(n)->running_sequences()));
                     return out;
                   });
  st.metrics.gauge("qkv_memory_bytes", "Bytes the tensor pool holds on the device (live, idle and caches; weights included).",
                   [device = so.device] {
                     const PoolStats p = BufferPool::stats(device);
                     return std::vector<std::pair<std::string, double>>{
                         {device.name(), static_cast<double>(p.bytes_live + p.bytes_cached + p.bytes_unpooled)}};
                   }, "device");
  if (BufferPool::memory_limit(so.device) > 0)
    st.metrics.gauge("qkv_memory_limit_bytes", "--max-memory: the most the tensor pool may hold on the device.",
                     [device = so.device] {
                       return std::vector<std::pair<std::string, double>>{
                           {device.name(), static_cast<double>(BufferPool::memory_limit(device))}};
                     }, "device");
  st.ready = true;
  if (!o.quiet) std::fprintf(stderr, "qkv serve: ready: %zu model%s\n", st.order.size(), st.order.size() == 1 ? "" : "s");
  listener.join();  // returns once a signal stopped the server and its HTTP threads finished
  signal_waiter.join();
  const bool drained = stop_models();
  if (!o.quiet) std::fprintf(stderr, "qkv serve: stopped%s\n", drained ? "" : " (--drain-timeout passed; queued requests got 503)");
  return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeCliOptions>();
  app.add_option("--model", o->models, "NAME=DIR: serve checkpoint DIR as model NAME (repeat for several)")
      ->required();
  app.add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", o->port, "Port (default 8080; 0: any free port, printed and written to --port-file)")
      ->check(FiniteRange(0, 65535));
  app.add_option("--port-file", o->port_file, "Write the port listened on to this file");
  app.add_option("--api-key", o->api_key, "Require Authorization: Bearer KEY on every route but /health");
  app.add_option("--api-key-file", o->api_key_file, "Read the API key from this file's first line");
  app.add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (413 past it; default 1 MiB)")
      ->check(FiniteRange(1, 1 << 30));
  app.add_option("--max-input-tokens", o->max_input_tokens,
                 "Tokens of one prompt or input at most (413 past it; default 0: the model's context)")
      ->check(FiniteRange(0, 1 << 24));
  app.add_option("--max-inputs", o->max_inputs, "Prompts or inputs in one request at most (413 past it; default 256)")
      ->check(FiniteRange(1, 1 << 20));
  app.add_option("--max-queue", o->max_queue, "Requests waiting per model; past it 503 with Retry-After (default 64)")
      ->check(FiniteRange(1, 1 << 20));
  app.add_option("--request-timeout", o->request_timeout, "Seconds before an unanswered request gets 504 (default 120)")
      ->check(FiniteRange(0.001, 86400));
  app.add_option("--max-batch-tokens", o->max_batch_tokens,
                 "Input tokens the requests of one batch may hold together (default 4096; 1: no batching across requests)")
      ->check(FiniteRange(1, 1 << 24));
  app.add_option("--batch-wait", o->batch_wait_ms, "A batch waits for more requests until none has come for this many milliseconds, at most 4 times that (default 10)")
      ->check(FiniteRange(0, 10000));
  app.add_option("--batch-size", o->batch_size, "Sentences decoded together inside a batch (default 32)")
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--max-concurrent-sequences", o->max_concurrent_sequences,
                 "Completions generated together: new ones join the running batch at its next step (default 16)")
      ->check(FiniteRange(1, 4096));
  app.add_option("--http-threads", o->http_threads, "Connections handled at once (default 32)")
      ->check(FiniteRange(1, 4096));
  app.add_option("--drain-timeout", o->drain_timeout,
                 "Seconds SIGINT/SIGTERM waits for queued and running requests before exiting (default 30)")
      ->check(FiniteRange(0, 86400));
  app.add_option("--max-memory", o->max_memory,
                 "Memory the server's tensors may take on its device, weights included (e.g. 2G, 1500M; default 0: "
                 "no limit but the device's). A request that would pass it gets 503 out_of_memory with Retry-After; "
                 "completions running together make room first (the batch is preempted and resumed with fewer rows)")
      ->check(MemorySize(/*for_training=*/false));
  app.add_option("--threads", o->threads, "Compute threads (default: $QKV_THREADS or all cores)")
      ->check(FiniteRange(0, kMaxThreads));
  add_quiet_flag(app, o->quiet,
                 "No log lines on stderr (listening, models loaded, ready, stopped; errors still; the port: --port-file)");
  add_compute_type_options(app, o->compute);
  return [o]() { return run_serve(*o); };
}

}  // namespace qkv::cli
