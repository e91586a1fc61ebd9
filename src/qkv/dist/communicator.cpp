#include "qkv/dist/communicator.h"

#include "qkv/core/error.h"

namespace qkv::dist {

Communicator& single_process() {
  static SingleProcess comm;
  return comm;
}

void check_all_ranks(Communicator& comm, const std::string& error) {
  if (comm.size() == 1) {
    if (!error.empty()) throw Error(error);
    return;
  }
  const double timeout = comm.timeout();
  comm.set_timeout(0);
  const std::vector<double> all = comm.gather({error.empty() ? 0.0 : static_cast<double>(error.size())}, "a check");
  int failed = -1, count = 0;
  for (int r = comm.size(); r-- > 0;)
    if (all[static_cast<size_t>(r)] > 0) {
      failed = r;
      ++count;
    }
  if (failed < 0) {
    comm.set_timeout(timeout);
    return;
  }
  std::string message = comm.rank() == failed ? error : std::string(static_cast<size_t>(all[static_cast<size_t>(failed)]), ' ');
  comm.broadcast(message.data(), static_cast<int64_t>(message.size()), failed);
  comm.set_timeout(timeout);
  throw CollectiveError(count == comm.size() ? message : "rank " + std::to_string(failed) + ": " + message);
}

bool mpi_compiled() {
#ifdef QKV_HAVE_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace qkv::dist
