// The data-parallel tests: a GoogleTest program that CTest starts under
//   mpirun --allow-run-as-root --oversubscribe -np 2 qkv_mpi_tests
// (tests/CMakeLists.txt). It owns the MPI session; every rank runs every test, and the tests
// reach the world communicator through mpi_world(). Run alone (not under mpirun) it is one rank.
#include <gtest/gtest.h>

#include "mpi_world.h"
#include "qkv/core/threads.h"

namespace {
qkv::dist::MpiSession* g_session = nullptr;
}

qkv::dist::Communicator& mpi_world() { return g_session->world(); }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  qkv::dist::MpiSession session;
  g_session = &session;
  qkv::set_num_threads(1);  // one thread per rank, as the one-process runs they are compared with
  // Only rank 0 reports (the others' results are checked through collectives where it matters).
  if (session.world().rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  // A failure on any rank fails the job.
  int64_t any = failed ? 1 : 0;
  session.world().allreduce_max(&any, 1);
  return any ? 1 : 0;
}
