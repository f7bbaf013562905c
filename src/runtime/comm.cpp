// The one-local-rank helpers of the communicator interface (comm.h).
#include <string>

#include "sparkdraft/comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft {

void Communicator::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  if (local_ranks().size() != 1)
    throw InvalidArgument("Communicator::all_gather: one buffer for " +
                          std::to_string(local_ranks().size()) + " local ranks");
  all_gather(&send, recv, bytes, stream);
}

void Communicator::all_reduce_sum(float* data, size_t count, void* stream) {
  if (local_ranks().size() != 1)
    throw InvalidArgument("Communicator::all_reduce_sum: one buffer for " +
                          std::to_string(local_ranks().size()) + " local ranks");
  all_reduce_sum(&data, count, stream);
}

}  // namespace sparkdraft
