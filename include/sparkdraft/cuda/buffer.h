// Owning device memory and streams for the CUDA backend and its tests.
//
// DeviceBuffer<T>: one cudaMalloc'd array of `size()` elements of T, freed on
// destruction, movable and not copyable (a copy would hide a device allocation).
// Host transfers go through a stream and wait for it, so they are ordered after
// the kernels queued on that stream even when it is a non-blocking stream.
// DeviceStream: an owned non-blocking stream (graph capture needs one that is not
// the legacy default stream).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

template <class T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds trivially copyable types");

 public:
  DeviceBuffer() = default;
  // Uninitialized storage for `count` elements (count 0 allocates nothing).
  explicit DeviceBuffer(size_t count) : size_(count) {
    if (count > 0) SD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  // Storage holding a copy of `host`.
  explicit DeviceBuffer(const std::vector<T>& host, cudaStream_t stream = nullptr)
      : DeviceBuffer(host.size()) {
    upload(host, stream);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; the error stays sticky
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

  // Copies `count` host elements to elements [offset, offset + count), then waits.
  void upload(const T* host, size_t count, size_t offset = 0, cudaStream_t stream = nullptr) {
    check_range("upload", offset, count);
    if (count == 0) return;
    SD_CUDA_CHECK(
        cudaMemcpyAsync(ptr_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // Copies the whole vector to the start of the buffer (it must fit).
  void upload(const std::vector<T>& host, cudaStream_t stream = nullptr) {
    upload(host.data(), host.size(), 0, stream);
  }

  // Copies elements [offset, offset + count) to host, after the work queued on `stream`.
  void download(T* host, size_t count, size_t offset = 0, cudaStream_t stream = nullptr) const {
    check_range("download", offset, count);
    if (count == 0) return;
    SD_CUDA_CHECK(
        cudaMemcpyAsync(host, ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // The whole buffer as a host vector.
  std::vector<T> download(cudaStream_t stream = nullptr) const {
    std::vector<T> host(size_);
    download(host.data(), size_, 0, stream);
    return host;
  }

  // Sets every byte to zero, queued on `stream` (no wait).
  void zero(cudaStream_t stream = nullptr) {
    if (size_ > 0) SD_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes(), stream));
  }

 private:
  void check_range(const char* what, size_t offset, size_t count) const {
    if (offset > size_ || count > size_ - offset)
      throw InvalidArgument(std::string("DeviceBuffer::") + what + ": elements [" +
                            std::to_string(offset) + ", " + std::to_string(offset + count) +
                            ") out of a buffer of " + std::to_string(size_));
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// An owned non-blocking CUDA stream.
class DeviceStream {
 public:
  DeviceStream() { SD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~DeviceStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  DeviceStream(DeviceStream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  DeviceStream& operator=(DeviceStream&& o) noexcept {
    if (this != &o) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }

  cudaStream_t get() const { return stream_; }
  void synchronize() const { SD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace sparkdraft::cuda
