#include "qkv/dist/mpi.h"

#include <cstdlib>

#include "qkv/core/error.h"

#ifdef QKV_HAVE_MPI
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <sstream>
#endif

namespace qkv::dist {

bool mpi_launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

#ifndef QKV_HAVE_MPI

MpiSession::MpiSession() {
  throw Error("this qkv was built without MPI (cmake -DQKV_MPI=OFF, or MPI not found): it trains in one process only");
}
MpiSession::~MpiSession() = default;
// Unreachable: without MPI no session can be constructed.
void MpiSession::abort(int) { std::abort(); }

#else

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagGather = 101, kTagProbe = 102, kTagAlive = 103, kTagResult = 104;
constexpr int64_t kMaxCount = int64_t{1} << 30;  // MPI counts are ints: larger buffers go in pieces

std::string library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, static_cast<size_t>(len));
  const size_t cut = v.find_first_of(",\n");
  return cut == std::string::npos ? v : v.substr(0, cut);
}

std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &busy_comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    MPI_Comm_free(&busy_comm_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override {
    return "MPI: " + std::to_string(size_) + (size_ == 1 ? " rank (" : " ranks (") + library_version() + ")";
  }

  void allreduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT, MPI_SUM, "an all-reduce"); }
  void allreduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE, MPI_SUM, "an all-reduce"); }
  void allreduce_max(int64_t* data, int64_t n) override { reduce(data, n, MPI_INT64_T, MPI_MAX, "an all-reduce"); }

  void broadcast(void* data, int64_t bytes, int root) override {
    std::vector<MPI_Request> reqs;
    for (int64_t at = 0; at < bytes; at += kMaxCount) {
      reqs.emplace_back();
      MPI_Ibcast(static_cast<char*>(data) + at, static_cast<int>(std::min(kMaxCount, bytes - at)), MPI_BYTE, root,
                 comm_, &reqs.back());
    }
    wait(reqs, "a broadcast from rank " + std::to_string(root));
  }

  void barrier() override {
    std::vector<MPI_Request> reqs(1);
    MPI_Ibarrier(comm_, &reqs[0]);
    wait(reqs, "a barrier");
  }

  std::vector<double> gather(const std::vector<double>& values, const std::string& what) override {
    const int n = static_cast<int>(values.size());
    std::vector<double> all(values.size() * static_cast<size_t>(size_));
    std::copy(values.begin(), values.end(), all.begin() + static_cast<std::ptrdiff_t>(rank_) * n);
    std::vector<MPI_Request> recvs, sends;
    std::vector<int> from;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      recvs.emplace_back();
      MPI_Irecv(all.data() + static_cast<std::ptrdiff_t>(r) * n, n, MPI_DOUBLE, r, kTagGather, comm_, &recvs.back());
      from.push_back(r);
      sends.emplace_back();
      MPI_Isend(values.data(), n, MPI_DOUBLE, r, kTagGather, comm_, &sends.back());
    }
    if (!poll(recvs)) {
      std::vector<int> silent;
      for (size_t i = 0; i < recvs.size(); ++i) {
        int done = 0;
        MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
        if (!done) silent.push_back(from[i]);
      }
      throw Error(timeout_message(what, silent));
    }
    wait(sends, what);
    return all;
  }

  // Signs of life and the result travel as point-to-point messages on a communicator of their own,
  // so that a receiver matching any tag from the root there sees them in the order they were sent
  // (MPI does not let messages between two ranks overtake each other): when the result arrives,
  // every sign of life sent before it has been received too, and none is left over.
  void signal_alive() override {
    const auto now = Clock::now();
    const double every = std::min(1.0, timeout() > 0 ? timeout() / 4 : 1.0);
    if (std::chrono::duration<double>(now - last_alive_).count() < every) return;
    last_alive_ = now;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request req;
      MPI_Isend(&kAliveByte, 1, MPI_BYTE, r, kTagAlive, busy_comm_, &req);
      MPI_Request_free(&req);  // a byte from static storage: nothing to wait for
    }
  }

  void broadcast_from_busy(void* data, int64_t bytes, int root, const std::string& what) override {
    QKV_CHECK(bytes < kMaxCount, "broadcast_from_busy: " << bytes << " bytes is too large");
    const int count = static_cast<int>(bytes);
    if (rank_ == root) {
      std::vector<MPI_Request> sends;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        sends.emplace_back();
        MPI_Isend(data, count, MPI_BYTE, r, kTagResult, busy_comm_, &sends.back());
      }
      wait(sends, what);
      last_alive_ = Clock::time_point{};
      return;
    }
    auto heard = Clock::now();
    for (int64_t spins = 0;; ++spins) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(root, MPI_ANY_TAG, busy_comm_, &flag, &status);
      if (flag && status.MPI_TAG == kTagResult) {
        MPI_Recv(data, count, MPI_BYTE, root, kTagResult, busy_comm_, MPI_STATUS_IGNORE);
        return;
      }
      if (flag) {
        char byte = 0;
        MPI_Recv(&byte, 1, MPI_BYTE, root, status.MPI_TAG, busy_comm_, MPI_STATUS_IGNORE);
        heard = Clock::now();
        spins = 0;
        continue;
      }
      const double silent = std::chrono::duration<double>(Clock::now() - heard).count();
      if (timeout() > 0 && silent > timeout()) {
        std::ostringstream os;
        os << "rank " << rank_ << ": " << what << ": rank " << root << " sent no sign of life for " << timeout()
           << " s (it died or hangs)";
        throw Error(os.str());
      }
      if (spins > 2000) ::usleep(spins > 20000 ? 1000 : 20);
    }
  }

  void start_allreduce_sum(float* data, int64_t n) override {
    for (int64_t at = 0; at < n; at += kMaxCount) {
      pending_.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, data + at, static_cast<int>(std::min(kMaxCount, n - at)), MPI_FLOAT, MPI_SUM, comm_,
                     &pending_.back());
    }
  }
  void progress() override {
    if (pending_.empty()) return;
    int done = 0;
    MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE);
    if (done) pending_.clear();
  }
  void wait_all() override {
    std::vector<MPI_Request> reqs;
    reqs.swap(pending_);
    wait(reqs, "the gradient all-reduce");
  }

 private:
  void reduce(void* data, int64_t n, MPI_Datatype type, MPI_Op op, const std::string& what) {
    int bytes = 0;
    MPI_Type_size(type, &bytes);
    std::vector<MPI_Request> reqs;
    for (int64_t at = 0; at < n; at += kMaxCount) {
      reqs.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * bytes, static_cast<int>(std::min(kMaxCount, n - at)),
                     type, op, comm_, &reqs.back());
    }
    wait(reqs, what);
  }

  // Tests `reqs` until all are done (true) or the timeout has passed (false). Spins for a moment,
  // then sleeps between tests so that a rank waiting for a slow one leaves the core to it.
  bool poll(std::vector<MPI_Request>& reqs) const {
    if (reqs.empty()) return true;
    const auto start = Clock::now();
    for (int64_t spins = 0;; ++spins) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
      QKV_CHECK(rc == MPI_SUCCESS, "rank " << rank_ << ": a collective failed: " << error_string(rc));
      if (done) return true;
      if (timeout() > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout()) return false;
      if (spins > 2000) ::usleep(spins > 20000 ? 1000 : 20);
    }
  }

  void wait(std::vector<MPI_Request>& reqs, const std::string& what) {
    if (!poll(reqs)) throw Error(timeout_message(what, probe()));
  }

  // After a collective timed out: every rank that is alive is (or soon will be) here too. Each
  // sends every other a message and listens for a short while; the ranks never heard from are
  // named. (A rank merely slower than the timeout is named as well: it would be one to look at.)
  std::vector<int> probe() {
    const double window = std::max(5.0, 0.1 * timeout());
    const int me = rank_;
    std::vector<int> got(static_cast<size_t>(size_), 0);
    std::vector<MPI_Request> recvs, sends;
    std::vector<int> from;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      recvs.emplace_back();
      MPI_Irecv(&got[static_cast<size_t>(r)], 1, MPI_INT, r, kTagProbe, comm_, &recvs.back());
      from.push_back(r);
      sends.emplace_back();
      MPI_Isend(&me, 1, MPI_INT, r, kTagProbe, comm_, &sends.back());
    }
    const auto start = Clock::now();
    std::vector<int> silent;
    while (std::chrono::duration<double>(Clock::now() - start).count() < window) {
      int done = 0;
      MPI_Testall(static_cast<int>(recvs.size()), recvs.data(), &done, MPI_STATUSES_IGNORE);
      if (done) return silent;  // everyone answered: the collective itself is stuck (should not happen)
      ::usleep(1000);
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      int done = 0;
      MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
      if (!done) silent.push_back(from[i]);
    }
    return silent;  // the requests stay pending: the job is about to be aborted
  }

  std::string timeout_message(const std::string& what, const std::vector<int>& silent) const {
    std::ostringstream os;
    os << "rank " << rank_ << ": " << what << " did not complete within " << timeout() << " s";
    if (silent.size() == 1) {
      os << "; rank " << silent[0] << " did not answer (it died or hangs)";
    } else if (!silent.empty()) {
      os << "; ranks";
      for (size_t i = 0; i < silent.size(); ++i) os << (i ? ", " : " ") << silent[i];
      os << " did not answer (they died or hang)";
    }
    return os.str();
  }

  static constexpr char kAliveByte = 1;
  MPI_Comm comm_ = MPI_COMM_NULL, busy_comm_ = MPI_COMM_NULL;
  Clock::time_point last_alive_{};
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;
};

}  // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  QKV_CHECK(!initialized, "MPI is already initialised in this process (one MpiSession per program)");
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes (and show up as timeouts or failed requests) instead of aborting
  // inside the library; a dead peer is still reported by mpirun, which then ends the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_ = std::make_unique<MpiCommunicator>();
  MPI_Comm host = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
    MPI_Comm_rank(host, &local_rank_);
    MPI_Comm_free(&host);
  } else {
    local_rank_ = world_->rank();
  }
}

MpiSession::~MpiSession() {
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // not reached
}

#endif

}  // namespace qkv::dist
