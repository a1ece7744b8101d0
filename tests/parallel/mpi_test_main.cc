// main() of the test binaries ctest runs under mpirun: MPI started for the process, then the tests
// on every rank (every rank's failures count: mpirun fails if any rank does).
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto session = dsinfer::MpiSession::start(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  return RUN_ALL_TESTS();
}
