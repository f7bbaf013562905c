// safetensors reader (mmap) and writer.
//
// File layout: u64 little-endian header size N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}}, then the data section. The reader validates the header
// size, the JSON, every dtype, shape and offset range (inside the data section,
// size = numel * dtype size, no overlap) and throws CheckpointError naming the
// file and tensor on anything wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sparkdraft {

enum class DType { bf16, f16, f32, f64, i8, u8, i32, i64, bool_ };
const char* dtype_name(DType d);  // safetensors spelling: "BF16", "F32", ...
size_t dtype_size(DType d);
DType dtype_from_name(const std::string& name);  // throws CheckpointError

struct TensorInfo {
  std::string name;
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  int64_t numel() const;
  std::string shape_string() const;  // "[4096, 151936]"
};

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Streams tensors to a file: the header is written first (all tensors must be
// declared with `add` before `write`); data comes from a callback per tensor so
// multi-GB checkpoints are never held in memory at once.
class SafetensorsWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t nbytes)>;
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void add_copy(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void set_metadata(const std::string& key, const std::string& value);
  // progress(bytes_done, bytes_total) is called after each tensor.
  void write(const std::string& path,
             const std::function<void(size_t, size_t)>& progress = nullptr) const;
  // Writes the whole file under path + ".tmp" (in the same directory) and returns
  // that name without renaming it: for a caller that renames several files into
  // place in an order of its own. On failure nothing is left behind.
  std::string write_temp(const std::string& path,
                         const std::function<void(size_t, size_t)>& progress = nullptr) const;
  size_t total_bytes() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Fill fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace sparkdraft
