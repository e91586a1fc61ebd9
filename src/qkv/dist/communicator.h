// The processes of a data-parallel training run, as the library sees them: rank, size and the few
// collective operations training needs. The library never starts or stops MPI: the program (the
// `qkv` command, a test) owns the MPI session (dist/mpi.h) and passes a Communicator in
// TrainerOptions. single_process() is the one-rank communicator every build has.
//
// Every collective waits at most timeout() seconds. Past it, it throws qkv::Error naming the ranks
// that did not answer (a rank that died or hangs); the caller must then abort the whole job
// (MpiSession::abort), since a collective left half done cannot be recovered.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "one process", "MPI: 2 ranks (Open MPI v4.1.4)", ...
  virtual std::string describe() const = 0;

  // In place, element-wise over the ranks; every rank gets the same result. With two ranks the sum
  // a + b is the same float in either order, so it is exactly what one process adding the two
  // gets; with more, the order of the additions is the MPI library's.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  virtual void allreduce_max(int64_t* data, int64_t n) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Every rank's `values` (the same count on each), rank-major: an all-gather built from messages
  // between every pair of ranks, so that past the timeout it can name the ranks that sent nothing.
  // Called once per training step as a heartbeat (stop requests, elapsed time).
  virtual std::vector<double> gather(const std::vector<double>& values, const std::string& what) = 0;

  // Non-blocking all-reduce (sum) of one gradient bucket, for overlapping communication with
  // backward: start it, call progress() now and then (MPI advances a request only inside its calls),
  // and wait_all() before reading the results. The buffer must stay untouched until then.
  // The default implementation reduces at once.
  virtual void start_allreduce_sum(float* data, int64_t n) { allreduce_sum(data, n); }
  virtual void progress() {}
  virtual void wait_all() {}

  // Work one rank does alone while the others wait for its result (rank 0's validation): the busy
  // rank calls signal_alive() now and then (it sends at most one message a second, or one per
  // quarter of the timeout when that is shorter), then broadcast_from_busy() with the result; the
  // others wait in broadcast_from_busy(), whose timeout restarts with every sign of life from
  // `root`. So the work may take as long as it takes, but a root that hangs is named within the
  // timeout. (One that dies ends the job through mpirun.)
  virtual void signal_alive() {}
  virtual void broadcast_from_busy(void* data, int64_t bytes, int root, const std::string& what) {
    (void)what;
    broadcast(data, bytes, root);
  }

  double timeout() const { return timeout_; }
  void set_timeout(double seconds) { timeout_ = seconds; }

 private:
  double timeout_ = 300;
};

// One rank: every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "one process"; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void allreduce_max(int64_t*, int64_t) override {}
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  std::vector<double> gather(const std::vector<double>& values, const std::string&) override { return values; }
};

// Thrown on every rank by check_all_ranks when a rank failed: every rank knows, none is left
// waiting, so each can end normally (exit status 1; rank 0 reports the message).
struct CollectiveError : Error {
  using Error::Error;
};
// A failure on one rank after which the others may be waiting in a collective for it (a step of
// training, a collective past its timeout): the program must abort the job (MpiSession::abort).
struct RankFailure : Error {
  using Error::Error;
};

// After a phase every rank runs on its own (reading data, building a vocabulary): `error` is this
// rank's failure ("" if none). When any rank failed, every rank throws qkv::Error with the message
// of the lowest failing rank, "rank R: ..." ("..." alone when every rank failed), as a
// CollectiveError, so all stop together instead of the others waiting for it in the first
// collective of training. Waits without a timeout (phases such as building a vocabulary take
// as long as they take; a rank that dies meanwhile ends the job through mpirun).
void check_all_ranks(Communicator& comm, const std::string& error);

// A process-wide SingleProcess (the Trainer's default).
Communicator& single_process();

// Whether this build has the MPI communicator (cmake found MPI and QKV_MPI is ON).
bool mpi_compiled();

}  // namespace qkv::dist
