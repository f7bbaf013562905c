// safetensors: an mmap reader that trusts nothing in the file, and a
// streaming writer.
//
// Reader: the whole file is mapped read-only and tensors point into the
// mapping, so a 5 GB checkpoint costs no copy and no load time. Because those
// pointers are handed straight to kernels, every header field is checked
// before anything points into the data: header size, JSON, dtype, shape,
// offsets (inside the data section, sized numel * dtype size, no overlap).
//
// Writer: the output file is sized up front (posix_fallocate, so a full disk
// fails here rather than as SIGBUS later), mapped, and each tensor's fill
// callback writes straight into the mapping: multi-GB checkpoints are never
// held in memory twice. The file is written under a temporary name (path +
// ".tmp", in the same directory) and renamed at the end, so a failed write
// leaves no half file behind.
#include "sparkdraft/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using json = nlohmann::json;
// The reference implementation's limit; a larger value is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::bf16, "BF16", 2}, {DType::f16, "F16", 2}, {DType::f32, "F32", 4},
    {DType::f64, "F64", 8},   {DType::i8, "I8", 1},   {DType::u8, "U8", 1},
    {DType::i32, "I32", 4},   {DType::i64, "I64", 8}, {DType::bool_, "BOOL", 1},
};

std::string errno_text() { return std::strerror(errno); }

// Reads a non-negative JSON integer; false when it is anything else.
bool read_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The header's JSON, read entry by entry (a SAX pass, linear in the header size):
// each top-level entry is built as a small JSON value of its own and handed to
// `on_entry` as soon as it is complete, so that no DOM of the whole header is held. (nlohmann's
// callback parser, which caught duplicates before, rescans the parent object at the end of every
// entry: quadratic, 190 s for 50 000 entries.)
class HeaderReader {
 public:
  using OnEntry = std::function<void(const std::string& name, json& value)>;
  explicit HeaderReader(OnEntry on_entry) : on_entry_(std::move(on_entry)) {}

  // Empty, or why the header is refused.
  const std::string& refusal() const { return refusal_; }

  bool null() { return add(json(nullptr)); }
  bool boolean(bool v) { return add(json(v)); }
  bool number_integer(json::number_integer_t v) { return add(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return add(json(v)); }
  bool string(json::string_t& v) { return add(json(std::move(v))); }
  bool binary(json::binary_t&) { return refuse("corrupt header: not valid JSON (binary value)"); }
  bool start_object(std::size_t) {
    if (!started_) return started_ = true;
    return open(json::object());
  }
  bool end_object() { return stack_.empty() ? true : close(); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (!stack_.empty()) {
      key_ = std::move(k);
      return true;
    }
    name_ = std::move(k);
    return true;
  }
  // Where, not what: the parser's own message quotes the bad token (file bytes,
  // possibly megabytes of them).
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    return refuse("corrupt header: not valid JSON (a syntax error at byte " +
                  std::to_string(position) + " of the header)");
  }

 private:
  bool refuse(const std::string& why) {
    if (refusal_.empty()) refusal_ = why;
    return false;
  }
  // A value: the whole entry (top level), or a part of the one being built.
  bool add(json v) {
    if (!started_) return refuse("corrupt header: not a JSON object");
    if (stack_.empty()) {
      on_entry_(name_, v);
      return true;
    }
    json& parent = *stack_.back();
    if (parent.is_array())
      parent.push_back(std::move(v));
    else
      parent[key_] = std::move(v);
    return true;
  }
  bool open(json container) {
    if (!started_) return refuse("corrupt header: not a JSON object");
    if (stack_.empty()) {
      entry_ = std::move(container);
      stack_.push_back(&entry_);
      return true;
    }
    // Pointers into the parent stay valid: only the innermost container grows.
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(container));
      stack_.push_back(&parent.back());
    } else {
      json& slot = parent[key_];
      slot = std::move(container);
      stack_.push_back(&slot);
    }
    return true;
  }
  bool close() {
    stack_.pop_back();
    if (stack_.empty()) on_entry_(name_, entry_);
    return true;
  }

  OnEntry on_entry_;
  bool started_ = false;
  std::string name_, key_, refusal_;
  json entry_;
  std::vector<json*> stack_;
};

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t.size;
  return 0;
}

DType dtype_from_name(const std::string& name) {
  for (const auto& t : kDTypes)
    if (name == t.name) return t.dtype;
  throw CheckpointError("unsupported safetensors dtype '" + io::excerpt(name) + "'");
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const { return shape_text(shape); }

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // Regular files only: a FIFO would block the mapping, a directory cannot be
  // mapped (both refused with what they are).
  const int fd = io::open_regular_file<CheckpointError>(path, "safetensors file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw CheckpointError("cannot stat '" + path + "': " + why);
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw CheckpointError(path + ": truncated safetensors file (" + std::to_string(file_size) +
                          " bytes; the header size alone takes 8)");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_error = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (map == MAP_FAILED) throw CheckpointError("cannot map '" + path + "': " + map_error);

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_ = map;
  file->map_size_ = file_size;
  auto corrupt = [&](const std::string& what) { throw CheckpointError(path + ": " + what); };

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  // The messages never quote the file's bytes (the header size field of a file
  // that is no safetensors file at all is its first 8 bytes of text).
  if (header_size > kMaxHeaderBytes)
    corrupt(
        "not a safetensors file, or a corrupt one: its header size field (the first 8 "
        "bytes) exceeds the " +
        std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (header_size > file_size - 8)
    corrupt(
        "truncated or corrupt file: the header size field (the first 8 bytes) says more "
        "than the file holds, so the header does not fit in the file (" +
        std::to_string(file_size) + " bytes)");

  const uint8_t* data = bytes + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
  bool metadata_seen = false;
  // nlohmann::json would keep the last of two equal keys; a repeated tensor name
  // is a corrupt (or forged) header.
  auto twice = [&](const std::string& name) {
    corrupt("corrupt header: tensor name '" + io::excerpt(name) + "' appears twice");
  };
  auto on_entry = [&](const std::string& name, const json& v) {
    if (name == "__metadata__") {
      if (metadata_seen) twice(name);
      metadata_seen = true;
      if (!v.is_object()) corrupt("corrupt header: __metadata__ must be an object of strings");
      for (const auto& m : v.items()) {
        if (!m.value().is_string())
          corrupt("corrupt header: __metadata__ entry '" + io::excerpt(m.key()) +
                  "' is not a string");
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      return;
    }
    auto bad = [&](const std::string& what) {
      corrupt("corrupt header: tensor '" + io::excerpt(name) + "': " + what);
    };
    if (!v.is_object()) bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-list 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      bad("'data_offsets' must be a list of two integers");

    TensorInfo t;
    t.name = name;
    try {
      t.dtype = dtype_from_name(v["dtype"].get<std::string>());
    } catch (const CheckpointError& e) {
      bad(e.what());
    }
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      uint64_t dim = 0;
      if (!read_u64(d, &dim) || dim > (uint64_t{1} << 62))
        bad("shape " + io::excerpt(v["shape"].dump()) + " must hold non-negative integers");
      t.shape.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(numel, dim, &numel))
        bad("shape " + io::excerpt(v["shape"].dump()) + " overflows");
    }
    uint64_t begin = 0, end = 0, nbytes = 0;
    if (!read_u64(v["data_offsets"][0], &begin) || !read_u64(v["data_offsets"][1], &end) ||
        end < begin)
      bad("data_offsets " + io::excerpt(v["data_offsets"].dump()) +
          " must be non-negative integers with begin <= end");
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes))
      bad("shape " + io::excerpt(v["shape"].dump()) + " overflows");
    if (end - begin != nbytes)
      bad("data_offsets " + io::excerpt(v["data_offsets"].dump()) + " hold " +
          std::to_string(end - begin) + " bytes but " + dtype_name(t.dtype) + " " +
          t.shape_string() + " needs " + std::to_string(nbytes));
    if (end > data_size)
      bad("data_offsets " + io::excerpt(v["data_offsets"].dump()) +
          " are out of range (the data section has " + std::to_string(data_size) +
          " bytes; truncated file?)");
    t.data = data + begin;
    t.nbytes = nbytes;
    if (nbytes > 0) ranges.emplace_back(begin, end, name);
    if (!file->tensors_.emplace(name, std::move(t)).second) twice(name);
  };
  HeaderReader reader(on_entry);
  if (!json::sax_parse(bytes + 8, bytes + 8 + header_size, &reader))
    corrupt(reader.refusal().empty() ? "corrupt header: not valid JSON" : reader.refusal());
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (std::get<0>(ranges[i]) < std::get<1>(ranges[i - 1]))
      corrupt("corrupt header: tensors '" + io::excerpt(std::get<2>(ranges[i - 1])) + "' and '" +
              io::excerpt(std::get<2>(ranges[i])) + "' overlap in the data section");
  // The data section ends where the last tensor does: bytes after it are a
  // sign of a damaged or concatenated file (the reference reader refuses them too).
  uint64_t data_end = 0;
  for (const auto& r : ranges) data_end = std::max(data_end, std::get<1>(r));
  if (data_end < data_size)
    corrupt(std::to_string(data_size - data_end) +
            " trailing bytes after the end of the last tensor's data (the data section has " +
            std::to_string(data_size) + " bytes, the tensors cover " + std::to_string(data_end) +
            ")");
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            Fill fill) {
  if (name.empty() || name == "__metadata__")
    throw InvalidArgument("safetensors writer: bad tensor name '" + name + "'");
  for (const Entry& e : entries_)
    if (e.name == name)
      throw InvalidArgument("safetensors writer: tensor '" + name + "' added twice");
  for (int64_t d : shape)
    if (d < 0)
      throw InvalidArgument("safetensors writer: tensor '" + name + "' has a negative dimension " +
                            shape_text(shape));
  if (!fill)
    throw InvalidArgument("safetensors writer: tensor '" + name + "' has no fill callback");
  entries_.push_back({name, dtype, std::move(shape), std::move(fill)});
}

void SafetensorsWriter::add_copy(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                 const void* data) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t nbytes = static_cast<size_t>(std::max<int64_t>(numel, 0)) * dtype_size(dtype);
  auto copy = std::make_shared<std::vector<uint8_t>>(nbytes);
  if (nbytes) {
    if (!data) throw InvalidArgument("safetensors writer: tensor '" + name + "' has no data");
    std::memcpy(copy->data(), data, nbytes);
  }
  // A zero-element tensor has nothing to copy (and memcpy from a null pointer
  // is undefined even for zero bytes).
  add(name, dtype, std::move(shape), [copy](uint8_t* dst, size_t n) {
    if (n) std::memcpy(dst, copy->data(), n);
  });
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

size_t SafetensorsWriter::total_bytes() const {
  size_t total = 0;
  for (const Entry& e : entries_) {
    size_t n = dtype_size(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<size_t>(d);
    total += n;
  }
  return total;
}

void SafetensorsWriter::write(const std::string& path,
                              const std::function<void(size_t, size_t)>& progress) const {
  const std::string tmp = write_temp(path, progress);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw IoError("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
}

std::string SafetensorsWriter::write_temp(
    const std::string& path, const std::function<void(size_t, size_t)>& progress) const {
  // Header: metadata first, then the tensors in declaration order (that is
  // also their order in the data section).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::vector<size_t> sizes;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    size_t n = dtype_size(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<size_t>(d);
    header[e.name] = {
        {"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    sizes.push_back(n);
    offset += n;
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so that the data section starts
  // 8-byte aligned in the file and therefore in the reader's mapping.
  text.append((8 - text.size() % 8) % 8, ' ');
  const size_t data_total = offset;
  const size_t file_size = 8 + text.size() + data_total;

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create '" + tmp + "': " + errno_text());
  void* map = MAP_FAILED;
  auto cleanup = [&] {
    if (map != MAP_FAILED) ::munmap(map, file_size);
    ::close(fd);
    ::unlink(tmp.c_str());
  };
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(file_size));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    cleanup();
    throw IoError("cannot allocate " + std::to_string(file_size) + " bytes for '" + path +
                  "': " + std::strerror(rc));
  }
  if (rc != 0 && ::ftruncate(fd, static_cast<off_t>(file_size)) != 0) {
    const std::string why = errno_text();
    cleanup();
    throw IoError("cannot size '" + tmp + "': " + why);
  }
  map = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    const std::string why = errno_text();
    cleanup();
    throw IoError("cannot map '" + tmp + "' for writing: " + why);
  }
  auto* out = static_cast<uint8_t*>(map);
  const uint64_t header_size = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(header_size >> (8 * i));
  std::memcpy(out + 8, text.data(), text.size());
  uint8_t* data = out + 8 + text.size();
  size_t done = 0;
  try {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (size_t i = 0; i < entries_.size(); ++i) {
#ifdef MADV_POPULATE_WRITE
      // Prefault the tensor's pages in one call (far cheaper than one fault
      // per page); where the kernel lacks it, pages fault in on demand.
      if (sizes[i] >= (size_t{1} << 20)) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(data + done) & ~(page - 1);
        const uintptr_t hi = reinterpret_cast<uintptr_t>(data + done + sizes[i]);
        ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
      }
#endif
      entries_[i].fill(data + done, sizes[i]);
      done += sizes[i];
      if (progress) progress(done, data_total);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  ::munmap(map, file_size);
  map = MAP_FAILED;
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw IoError("cannot write '" + tmp + "': " + why);
  }
  return tmp;
}

}  // namespace sparkdraft
