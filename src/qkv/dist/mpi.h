// The MPI session of a program and the MPI communicator (MPI_COMM_WORLD). Compiled against MPI when
// cmake found it (QKV_MPI, on by default); without MPI, mpi_launched() still tells whether mpirun
// started this process (so a program can refuse it clearly) and MpiSession throws.
//
// Only the program owns the session: it calls MPI_Init_thread when constructed and MPI_Finalize when
// destroyed. After a failure on one rank (an error, a collective past its timeout) the others may be
// waiting in a collective forever, so the program calls abort(), which is MPI_Abort on the world
// and ends every rank of the job; it is not for library code.
#pragma once
#include <memory>

#include "qkv/dist/communicator.h"

namespace qkv::dist {

// True when this process was started by mpirun / mpiexec / srun with more than one process... or
// one: $OMPI_COMM_WORLD_SIZE, $PMI_SIZE or $PMIX_RANK is set.
bool mpi_launched();

class MpiSession {
 public:
  // MPI_Init_thread (MPI_THREAD_FUNNELED: only the thread that trains calls MPI). Throws qkv::Error
  // in a build without MPI.
  MpiSession();
  ~MpiSession();  // MPI_Finalize, unless abort() was called
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // MPI_COMM_WORLD (a duplicate of it) as a Communicator.
  Communicator& world() { return *world_; }
  // This rank's index among the ranks on its own host (MPI_Comm_split_type, shared memory): which
  // of the host's GPUs it takes when every rank has one.
  int local_rank() const { return local_rank_; }
  // MPI_Abort(MPI_COMM_WORLD, code): every rank of the job exits with `code`.
  [[noreturn]] void abort(int code);

 private:
  std::unique_ptr<Communicator> world_;
  int local_rank_ = 0;
};

}  // namespace qkv::dist
