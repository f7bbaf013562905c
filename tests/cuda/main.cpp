// The GPU tests' main: CUDA loads every kernel when it starts (CUDA_MODULE_LOADING=EAGER,
// unless the environment says otherwise) before GoogleTest runs. The peer-to-peer
// communicator's kernels wait on other ranks' kernels, and a lazily loaded kernel of
// one rank can wait for those to finish (cuda/p2p_comm.h).
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // before the first CUDA call
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
