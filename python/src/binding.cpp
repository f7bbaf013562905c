// sparkdraft._core: the nanobind module under the Python package (docs/python.md).
//
// The only code of the project that sees Python or DLPack. Every array argument is
// any object with __dlpack__ (torch, CuPy, numpy on the CPU backend), taken zero-copy;
// its device, dtype, shape and contiguity are checked here, before any call, with a
// message that names the call and the argument (nothing is written on a refusal).
// The library's own checks (validate_options, validate_context, validate_propose)
// then run on the values, and its typed errors (sparkdraft/error.h) become the
// Python exceptions of the same names. The GIL is released during every library call.
//
// Backends: "cpu" (the host API on host memory) and "cuda" (cuda::CudaDraft's device
// API on the caller's stream: no allocation, no host synchronization when `validate`
// is off, capturable in the caller's CUDA graph).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"
#include "sparkdraft/scenario.h"
#include "sparkdraft/schedule.h"
#include "sparkdraft/verify.h"
#include "sparkdraft/version.h"

#ifdef SPARKDRAFT_HAVE_CUDA
#include <cuda_runtime.h>

#include "sparkdraft/cuda/draft.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace sparkdraft::python {
namespace {

// An argument of the wrong dtype: sparkdraft.DTypeError (an InvalidArgument and a TypeError).
class DTypeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// ---- exceptions -----------------------------------------------------------------------

struct ErrorTypes {
  PyObject *error, *config, *checkpoint, *nonfinite, *invalid, *dtype, *io, *unavailable, *device;
};
ErrorTypes g_errors{};

PyObject* new_error(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string full = std::string("sparkdraft.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (!t) throw nb::python_error();
  m.attr(name) = nb::handle(t);
  return t;
}

PyObject* tuple_of(std::initializer_list<PyObject*> items) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  Py_ssize_t i = 0;
  for (PyObject* x : items) {
    Py_INCREF(x);
    PyTuple_SET_ITEM(t, i++, x);
  }
  return t;
}

void register_errors(nb::module_& m) {
  ErrorTypes& e = g_errors;
  e.error = new_error(m, "Error", PyExc_Exception, "Base of every error sparkdraft raises.");
  e.config = new_error(m, "ConfigError", tuple_of({e.error, PyExc_ValueError}),
                       "A model config that is malformed or unsupported.");
  e.checkpoint = new_error(m, "CheckpointError", e.error,
                           "A checkpoint file or tensor that is missing, malformed or does not "
                           "match the config.");
  e.nonfinite = new_error(m, "NonFiniteWeights", e.checkpoint,
                          "A checkpoint refused because a tensor holds NaN or infinity.");
  e.invalid = new_error(m, "InvalidArgument", tuple_of({e.error, PyExc_ValueError}),
                        "Bad input refused at the API boundary (shapes, devices, ids, slots, "
                        "temperatures, ...); nothing was written.");
  e.dtype = new_error(m, "DTypeError", tuple_of({e.invalid, PyExc_TypeError}),
                      "An array argument of the wrong dtype; nothing was written.");
  e.io = new_error(m, "IoError", tuple_of({e.error, PyExc_OSError}),
                   "A file-system operation that failed or was refused.");
  e.unavailable = new_error(m, "Unavailable", e.error,
                            "A capability this build or machine lacks (the CUDA backend, a GPU).");
  e.device = new_error(m, "DeviceError", e.error, "A CUDA call that failed.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const DTypeError& x) {
      PyErr_SetString(g_errors.dtype, x.what());
    } catch (const InvalidArgument& x) {
      PyErr_SetString(g_errors.invalid, x.what());
    } catch (const NonFiniteWeights& x) {
      PyErr_SetString(g_errors.nonfinite, x.what());
    } catch (const CheckpointError& x) {
      PyErr_SetString(g_errors.checkpoint, x.what());
    } catch (const ConfigError& x) {
      PyErr_SetString(g_errors.config, x.what());
    } catch (const IoError& x) {
      PyErr_SetString(g_errors.io, x.what());
    } catch (const Unavailable& x) {
      PyErr_SetString(g_errors.unavailable, x.what());
    } catch (const DeviceError& x) {
      PyErr_SetString(g_errors.device, x.what());
    } catch (const Error& x) {
      PyErr_SetString(g_errors.error, x.what());
    }
  });
}

// ---- array checks ---------------------------------------------------------------------

using Array = nb::ndarray<nb::ro>;  // inputs (read-only arrays accepted)
using OutArray = nb::ndarray<>;     // outputs

enum class DT { i64, i32, f32, bf16 };

const char* dt_name(DT d) {
  switch (d) {
    case DT::i64: return "int64";
    case DT::i32: return "int32";
    case DT::f32: return "float32";
    case DT::bf16: return "bfloat16 (or uint16 holding bfloat16 bits)";
  }
  return "?";
}

std::string dlpack_name(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  std::string kind;
  switch (static_cast<C>(t.code)) {
    case C::Int: kind = "int"; break;
    case C::UInt: kind = "uint"; break;
    case C::Float: kind = "float"; break;
    case C::Bfloat: kind = "bfloat"; break;
    case C::Bool: return "bool";
    case C::Complex: kind = "complex"; break;
    default: kind = "dtype code " + std::to_string(t.code) + " bits "; break;
  }
  return kind + std::to_string(t.bits) + (t.lanes != 1 ? " x" + std::to_string(t.lanes) : "");
}

bool dt_matches(DT d, nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return false;
  const auto code = static_cast<C>(t.code);
  switch (d) {
    case DT::i64: return code == C::Int && t.bits == 64;
    case DT::i32: return code == C::Int && t.bits == 32;
    case DT::f32: return code == C::Float && t.bits == 32;
    case DT::bf16: return (code == C::Bfloat || code == C::UInt) && t.bits == 16;
  }
  return false;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Where the draft runs: DLPack device type (kDLCPU 1, kDLCUDA 2) and id.
struct Device {
  int type = 1;
  int id = 0;
  std::string text() const { return type == 1 ? "cpu" : "cuda:" + std::to_string(id); }
};

std::string device_text(int type, int id) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda:" + std::to_string(id);
    case 3: return "cuda pinned host memory";
    case 13: return "cuda managed memory";
    default: return "DLPack device type " + std::to_string(type);
  }
}

// Checks one array argument of call `fn` and returns its data pointer. `shape`: the
// expected shape, -1 = any extent (then `rows_at_least` applies to dim 0 if >= 0).
template <class A>
void* check_array(const A& a, const std::string& fn, const char* name, DT dt,
                  const std::vector<int64_t>& shape, const Device& dev) {
  const std::string what = fn + ": " + name;
  if (!dt_matches(dt, a.dtype()))
    throw DTypeError(what + " must be " + dt_name(dt) + ", got " + dlpack_name(a.dtype()));
  if (a.device_type() != dev.type || (dev.type == 2 && a.device_id() != dev.id))
    throw InvalidArgument(what + " is on " + device_text(a.device_type(), a.device_id()) +
                          "; the draft runs on " + dev.text());
  std::vector<int64_t> got(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) got[i] = static_cast<int64_t>(a.shape(i));
  bool ok = got.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || shape[i] == got[i];
  if (!ok) {
    std::vector<int64_t> want = shape;
    std::string w = "(";
    for (size_t i = 0; i < want.size(); ++i)
      w += (i ? ", " : "") + (want[i] < 0 ? std::string("any") : std::to_string(want[i]));
    w += want.size() == 1 ? ",)" : ")";
    throw InvalidArgument(what + " has shape " + shape_text(got) + ", expected " + w);
  }
  // An array of no elements is contiguous whatever its strides (frameworks give it any).
  bool empty = false;
  for (const int64_t e : got) empty = empty || e == 0;
  int64_t expect = 1;
  for (size_t i = got.size(); !empty && i-- > 0;) {
    if (got[i] != 1 && a.stride(i) != expect) {
      std::vector<int64_t> strides(a.ndim());
      for (size_t j = 0; j < a.ndim(); ++j) strides[j] = a.stride(j);
      throw InvalidArgument(what + " is not contiguous (strides " + shape_text(strides) +
                            " elements for shape " + shape_text(got) +
                            "); pass a row-major contiguous array (e.g. .contiguous())");
    }
    expect *= got[i];
  }
  return const_cast<void*>(static_cast<const void*>(a.data()));
}

// ---- numpy results (host copies: the scenario trace, host reads) ----------------------

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T> v, std::vector<size_t> shape) {
  auto* p = new std::vector<T>(std::move(v));
  nb::capsule owner(p, [](void* x) noexcept { delete static_cast<std::vector<T>*>(x); });
  return nb::ndarray<nb::numpy, T>(p->data(), shape.size(), shape.data(), owner);
}

nb::ndarray<nb::numpy, uint16_t> bf16_bits(const std::vector<bf16>& v, std::vector<size_t> shape) {
  std::vector<uint16_t> bits(v.size());
  static_assert(sizeof(bf16) == sizeof(uint16_t));
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(uint16_t));
  return to_numpy(std::move(bits), std::move(shape));
}

// ---- CUDA helpers ---------------------------------------------------------------------

#ifdef SPARKDRAFT_HAVE_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                      cudaGetErrorString(e));
}

// Makes `device` current for a scope (the draft's GPU), restoring the caller's.
struct DeviceGuard {
  int previous = -1;
  explicit DeviceGuard(int device) {
    cuda_check(cudaGetDevice(&previous), "cudaGetDevice");
    if (previous != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous && previous >= 0)
      (void)cudaSetDevice(previous);
  }
};

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

// A host copy of `count` elements of device memory, read on `s` (a synchronization:
// the eager form's `validate` only, never while capturing).
template <class T>
std::vector<T> to_host(const void* dev, size_t count, cudaStream_t s) {
  std::vector<T> host(count);
  if (count == 0) return host;
  cuda_check(cudaMemcpyAsync(host.data(), dev, count * sizeof(T), cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return host;
}
#endif

// ---- the draft ------------------------------------------------------------------------

struct PyCheckpoint {
  std::shared_ptr<const Checkpoint> ckpt;
};

struct PyDraft {
  std::shared_ptr<const Checkpoint> ckpt;
  Device dev;
  bool validate = true;
  std::unique_ptr<DraftBackend> backend;
#ifdef SPARKDRAFT_HAVE_CUDA
  cuda::CudaDraft* gpu = nullptr;  // backend, when dev is a GPU
#endif
  std::vector<Array> kv_owners;  // the caller's KV caches, kept alive with the draft

  const ModelConfig& config() const { return backend->config(); }
  const DraftOptions& options() const { return backend->options(); }
  int64_t kv_slots() const { return int64_t{options().num_pages} * options().page_size; }
  std::vector<int64_t> kv_shape() const {
    return {kv_slots(), config().num_kv_heads, 2 * int64_t{config().head_dim}};
  }
};

std::unique_ptr<PyDraft> make_draft(const PyCheckpoint& ck, const std::string& device_type,
                                    int device_id, const DraftOptions& base, int max_context_tokens,
                                    bool cuda_graph, bool validate,
                                    const std::vector<Array>& kv_caches) {
  auto d = std::make_unique<PyDraft>();
  d->ckpt = ck.ckpt;
  d->validate = validate;
  DraftOptions o = base;
  const ModelConfig& c = ck.ckpt->config();
  if (device_type == "cpu") {
    d->dev = Device{1, 0};
  } else if (device_type == "cuda") {
    d->dev = Device{2, device_id};
  } else {
    throw InvalidArgument("Draft: device '" + device_type + "' (give \"cpu\" or \"cuda[:N]\")");
  }
  if (!kv_caches.empty()) {
    if (kv_caches.size() != static_cast<size_t>(c.num_layers))
      throw InvalidArgument("Draft: kv_caches has " + std::to_string(kv_caches.size()) +
                            " arrays; give one per layer (" + std::to_string(c.num_layers) + ")");
    validate_options(c, o);  // the shape below needs sane pages
    const std::vector<int64_t> shape{int64_t{o.num_pages} * o.page_size, c.num_kv_heads,
                                     2 * int64_t{c.head_dim}};
    for (size_t l = 0; l < kv_caches.size(); ++l) {
      const std::string name = "kv_caches[" + std::to_string(l) + "]";
      o.kv_caches.push_back(static_cast<bf16*>(
          check_array(kv_caches[l], "Draft", name.c_str(), DT::bf16, shape, d->dev)));
    }
    d->kv_owners = kv_caches;
  }
  if (d->dev.type == 1) {
    nb::gil_scoped_release release;
    d->backend = make_cpu_backend(ck.ckpt, o);
    return d;
  }
#ifdef SPARKDRAFT_HAVE_CUDA
  if (o.tp != 1)
    throw Unavailable("Draft: the Python CUDA backend drafts at tp 1 (got tp " +
                      std::to_string(o.tp) + ")");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw Unavailable("Draft: no usable CUDA GPU in this process");
  }
  if (device_id < 0 || device_id >= count)
    throw InvalidArgument("Draft: device cuda:" + std::to_string(device_id) + " of " +
                          std::to_string(count) + " GPUs");
  cuda::CudaDraftOptions co;
  co.cuda_graph = cuda_graph;
  co.max_context_tokens = max_context_tokens;
  {
    nb::gil_scoped_release release;
    DeviceGuard guard(device_id);
    auto g = std::make_unique<cuda::CudaDraft>(ck.ckpt, o, co);
    d->gpu = g.get();
    d->backend = std::move(g);
  }
  return d;
#else
  (void)max_context_tokens;
  (void)cuda_graph;
  throw Unavailable("Draft: this sparkdraft was built without the CUDA backend (no nvcc)");
#endif
}

// Propose's arguments, checked; rows = anchor_tokens' length (the eager form) or the
// bound buffers' row prefix (the bound form).
struct ProposeArgs {
  ProposeBatch batch;
  ProposeOutputs out;
};

ProposeArgs check_propose(const PyDraft& d, const std::string& fn, const Array& anchor_tokens,
                          const Array& anchor_positions, const Array& seeds,
                          const Array& temperatures, const Array& cache_slots,
                          const Array& block_tables, const OutArray& out_tokens,
                          const OutArray& out_draft_logits,
                          const OutArray* out_confidences = nullptr,
                          const Array* lengths = nullptr) {
  const ModelConfig& c = d.config();
  const DraftOptions& o = d.options();
  if (anchor_tokens.ndim() != 1)
    throw InvalidArgument(fn + ": anchor_tokens must be 1-D [rows], got " +
                          std::to_string(anchor_tokens.ndim()) + " dimensions");
  const int64_t R = static_cast<int64_t>(anchor_tokens.shape(0));
  const int64_t N = c.block_size, V = c.vocab_size;
  ProposeArgs a;
  ProposeBatch& b = a.batch;
  b.anchor_tokens = static_cast<const int64_t*>(
      check_array(anchor_tokens, fn, "anchor_tokens", DT::i64, {R}, d.dev));
  b.anchor_positions = static_cast<const int64_t*>(
      check_array(anchor_positions, fn, "anchor_positions", DT::i64, {R}, d.dev));
  b.seeds = static_cast<const int64_t*>(check_array(seeds, fn, "seeds", DT::i64, {R}, d.dev));
  b.temperatures =
      static_cast<const float*>(check_array(temperatures, fn, "temperatures", DT::f32, {R}, d.dev));
  b.cache_slots =
      static_cast<const int64_t*>(check_array(cache_slots, fn, "cache_slots", DT::i64, {R}, d.dev));
  b.block_tables = static_cast<const int32_t*>(check_array(
      block_tables, fn, "block_tables", DT::i32, {R, int64_t{o.max_pages_per_req}}, d.dev));
  a.out.draft_tokens =
      static_cast<int64_t*>(check_array(out_tokens, fn, "out_tokens", DT::i64, {R, N}, d.dev));
  a.out.draft_logits = static_cast<bf16*>(check_array(
      out_draft_logits, fn, "out_draft_logits", DT::bf16, {int64_t{o.cache_slots}, N, V}, d.dev));
  if (out_confidences) {
    if (!c.confidence_head)
      throw InvalidArgument(fn +
                            ": out_confidences was given but the draft has no confidence head "
                            "(enable_confidence_head is false)");
    a.out.confidences = static_cast<float*>(
        check_array(*out_confidences, fn, "out_confidences", DT::f32, {R, N}, d.dev));
  }
  if (lengths)  // contract.md 9.5
    b.lengths =
        static_cast<const int32_t*>(check_array(*lengths, fn, "lengths", DT::i32, {R}, d.dev));
  if (R < 1 || R > o.max_reqs)
    throw InvalidArgument(fn + ": rows " + std::to_string(R) +
                          " is outside [1, max_reqs = " + std::to_string(o.max_reqs) + "]");
  b.num_rows = static_cast<int>(R);
  return a;
}

ContextBatch check_context(const PyDraft& d, const std::string& fn, const Array& hidden,
                           const Array& positions, const Array& slots) {
  const ModelConfig& c = d.config();
  if (positions.ndim() != 1)
    throw InvalidArgument(fn + ": positions must be 1-D [tokens], got " +
                          std::to_string(positions.ndim()) + " dimensions");
  const int64_t T = static_cast<int64_t>(positions.shape(0));
  ContextBatch b;
  b.hidden = static_cast<const bf16*>(check_array(
      hidden, fn, "hidden", DT::bf16, {T, int64_t{c.taps()} * c.target_hidden_size}, d.dev));
  b.positions =
      static_cast<const int64_t*>(check_array(positions, fn, "positions", DT::i64, {T}, d.dev));
  b.slots = static_cast<const int64_t*>(check_array(slots, fn, "slots", DT::i64, {T}, d.dev));
  if (T > (int64_t{1} << 30)) throw InvalidArgument(fn + ": too many tokens");
  b.num_tokens = static_cast<int>(T);
  return b;
}

// The library call of store_context on checked arguments (GIL released).
void run_store_context(PyDraft& d, const ContextBatch& b, uintptr_t stream, bool validate) {
  if (d.dev.type == 1) {
    nb::gil_scoped_release release;
    d.backend->store_context(b);
    return;
  }
#ifdef SPARKDRAFT_HAVE_CUDA
  nb::gil_scoped_release release;
  DeviceGuard guard(d.dev.id);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (validate && b.num_tokens > 0 && !capturing(s)) {
    const auto pos = to_host<int64_t>(b.positions, b.num_tokens, s);
    const auto slots = to_host<int64_t>(b.slots, b.num_tokens, s);
    ContextBatch h = b;
    h.positions = pos.data();
    h.slots = slots.data();
    validate_context(d.config(), d.options(), h);
  }
  d.gpu->store_context_device(b, s);
#else
  (void)stream;
  (void)validate;
#endif
}

// The library call of propose on checked arguments (GIL released). `graphed`: the
// bound form (replays the backend's graph unless the stream is capturing).
void run_propose(PyDraft& d, const ProposeArgs& a, uintptr_t stream, bool validate, bool graphed) {
  if (d.dev.type == 1) {
    nb::gil_scoped_release release;
    d.backend->propose(a.batch, a.out);  // validates (host memory)
    return;
  }
#ifdef SPARKDRAFT_HAVE_CUDA
  nb::gil_scoped_release release;
  DeviceGuard guard(d.dev.id);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const ProposeBatch& b = a.batch;
  if (validate && !capturing(s)) {
    const size_t R = static_cast<size_t>(b.num_rows);
    const auto tok = to_host<int64_t>(b.anchor_tokens, R, s);
    const auto pos = to_host<int64_t>(b.anchor_positions, R, s);
    const auto seeds = to_host<int64_t>(b.seeds, R, s);
    const auto temps = to_host<float>(b.temperatures, R, s);
    const auto slots = to_host<int64_t>(b.cache_slots, R, s);
    const auto tables =
        to_host<int32_t>(b.block_tables, R * static_cast<size_t>(d.options().max_pages_per_req), s);
    const auto lengths = b.lengths ? to_host<int32_t>(b.lengths, R, s) : std::vector<int32_t>();
    const ProposeBatch h{
        b.num_rows,   tok.data(),   pos.data(),    seeds.data(),
        temps.data(), slots.data(), tables.data(), b.lengths ? lengths.data() : nullptr};
    validate_propose(d.config(), d.options(), h);
  }
  if (graphed)
    d.gpu->propose_device_graphed(b, a.out, s);
  else
    d.gpu->propose_device(b, a.out, s);
#else
  (void)stream;
  (void)validate;
  (void)graphed;
#endif
}

// Verify's arguments, checked (rows = draft_tokens' length in the eager form).
struct VerifyArgs {
  VerifyBatch batch;
  VerifyOutputs out;
};

VerifyMethod parse_method(const std::string& m) {
  if (m == "standard") return VerifyMethod::standard;
  if (m == "block") return VerifyMethod::block;
  throw InvalidArgument("verify: method '" + m + "' (give \"standard\" or \"block\")");
}

VerifyArgs check_verify(const PyDraft& d, const std::string& fn, const Array& draft_tokens,
                        const Array& anchor_positions, const Array& seeds,
                        const Array& temperatures, const Array& cache_slots,
                        const Array& draft_logits, const Array& target_logits,
                        const OutArray& out_num_accepted, const OutArray& out_tokens,
                        const Array* top_k, const Array* top_p, const Array* lengths,
                        const std::string& method) {
  const ModelConfig& c = d.config();
  const DraftOptions& o = d.options();
  if (draft_tokens.ndim() != 2)
    throw InvalidArgument(fn + ": draft_tokens must be 2-D [rows, N], got " +
                          std::to_string(draft_tokens.ndim()) + " dimensions");
  const int64_t R = static_cast<int64_t>(draft_tokens.shape(0));
  const int64_t N = c.block_size, V = c.vocab_size;
  VerifyArgs a;
  VerifyBatch& b = a.batch;
  b.method = parse_method(method);
  b.draft_tokens = static_cast<const int64_t*>(
      check_array(draft_tokens, fn, "draft_tokens", DT::i64, {R, N}, d.dev));
  b.anchor_positions = static_cast<const int64_t*>(
      check_array(anchor_positions, fn, "anchor_positions", DT::i64, {R}, d.dev));
  b.seeds = static_cast<const int64_t*>(check_array(seeds, fn, "seeds", DT::i64, {R}, d.dev));
  b.temperatures =
      static_cast<const float*>(check_array(temperatures, fn, "temperatures", DT::f32, {R}, d.dev));
  b.cache_slots =
      static_cast<const int64_t*>(check_array(cache_slots, fn, "cache_slots", DT::i64, {R}, d.dev));
  b.draft_logits = static_cast<const bf16*>(check_array(draft_logits, fn, "draft_logits", DT::bf16,
                                                        {int64_t{o.cache_slots}, N, V}, d.dev));
  if (dt_matches(DT::f32, target_logits.dtype())) {
    b.target_dtype = LogitsDType::f32;
    b.target_logits =
        check_array(target_logits, fn, "target_logits", DT::f32, {R, N + 1, V}, d.dev);
  } else {
    using C = nb::dlpack::dtype_code;
    const auto t = target_logits.dtype();
    if (!(static_cast<C>(t.code) == C::Bfloat && t.bits == 16 && t.lanes == 1))
      throw DTypeError(fn + ": target_logits must be bfloat16 or float32, got " + dlpack_name(t));
    b.target_dtype = LogitsDType::bf16;
    b.target_logits =
        check_array(target_logits, fn, "target_logits", DT::bf16, {R, N + 1, V}, d.dev);
  }
  if (top_k)
    b.top_k = static_cast<const int32_t*>(check_array(*top_k, fn, "top_k", DT::i32, {R}, d.dev));
  if (top_p)
    b.top_p = static_cast<const float*>(check_array(*top_p, fn, "top_p", DT::f32, {R}, d.dev));
  if (lengths)
    b.lengths =
        static_cast<const int32_t*>(check_array(*lengths, fn, "lengths", DT::i32, {R}, d.dev));
  a.out.num_accepted = static_cast<int32_t*>(
      check_array(out_num_accepted, fn, "out_num_accepted", DT::i32, {R}, d.dev));
  a.out.tokens =
      static_cast<int64_t*>(check_array(out_tokens, fn, "out_tokens", DT::i64, {R, N + 1}, d.dev));
  if (R < 1 || R > o.max_reqs)
    throw InvalidArgument(fn + ": rows " + std::to_string(R) +
                          " is outside [1, max_reqs = " + std::to_string(o.max_reqs) + "]");
  b.num_rows = static_cast<int>(R);
  return a;
}

#ifdef SPARKDRAFT_HAVE_CUDA
// Whether G (cuda::CudaDraft) has the GPU verifier (the verify-cuda work adds it).
template <class G>
constexpr bool has_verify_device() {
  return requires(G & g, const VerifyBatch& b, const VerifyOutputs& o, cudaStream_t s) {
    g.verify_device(b, o, s);
  };
}

// The verifier on device pointers: CudaDraft::verify_device where this build has it (no
// allocation, no synchronization, capturable), else the host API on copies (the CPU
// reference: the same bits; a synchronization, so refused while the stream captures).
template <class G>
void gpu_verify(G& g, const PyDraft& d, const VerifyArgs& a, cudaStream_t s, bool validate) {
  const VerifyBatch& b = a.batch;
  const size_t R = static_cast<size_t>(b.num_rows);
  const size_t N = static_cast<size_t>(d.config().block_size);
  const size_t V = static_cast<size_t>(d.config().vocab_size);
  const size_t slots = static_cast<size_t>(d.options().cache_slots);
  const bool capture = capturing(s);
  std::vector<int64_t> tok, pos, seeds, cs;
  std::vector<float> temps, p;
  std::vector<int32_t> k, lens;
  VerifyBatch h = b;  // host copies of the index arrays (validation, or the host verifier)
  auto read_indices = [&] {
    h.draft_tokens = (tok = to_host<int64_t>(b.draft_tokens, R * N, s)).data();
    h.anchor_positions = (pos = to_host<int64_t>(b.anchor_positions, R, s)).data();
    h.seeds = (seeds = to_host<int64_t>(b.seeds, R, s)).data();
    h.temperatures = (temps = to_host<float>(b.temperatures, R, s)).data();
    h.cache_slots = (cs = to_host<int64_t>(b.cache_slots, R, s)).data();
    if (b.top_k) h.top_k = (k = to_host<int32_t>(b.top_k, R, s)).data();
    if (b.top_p) h.top_p = (p = to_host<float>(b.top_p, R, s)).data();
    if (b.lengths) h.lengths = (lens = to_host<int32_t>(b.lengths, R, s)).data();
  };
  if constexpr (has_verify_device<G>()) {
    if (validate && !capture) {
      read_indices();
      validate_verify(d.config(), d.options(), h);
    }
    g.verify_device(b, a.out, s);
  } else {
    if (capture)
      throw Unavailable(
          "verify: this build has no GPU verifier (CudaDraft::verify_device), and the host "
          "verifier cannot run inside a CUDA graph capture");
    read_indices();
    const size_t bytes = b.target_dtype == LogitsDType::f32 ? 4 : 2;
    const auto dl = to_host<bf16>(b.draft_logits, slots * N * V, s);
    const auto tl = to_host<uint8_t>(b.target_logits, R * (N + 1) * V * bytes, s);
    std::vector<int32_t> acc = to_host<int32_t>(a.out.num_accepted, R, s);
    std::vector<int64_t> out = to_host<int64_t>(a.out.tokens, R * (N + 1), s);
    h.draft_logits = dl.data();
    h.target_logits = tl.data();
    g.verify(h, VerifyOutputs{acc.data(), out.data()});  // validates
    cuda_check(cudaMemcpyAsync(a.out.num_accepted, acc.data(), R * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync");
    cuda_check(cudaMemcpyAsync(a.out.tokens, out.data(), out.size() * sizeof(int64_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
}
#endif

void run_verify(PyDraft& d, const VerifyArgs& a, uintptr_t stream, bool validate) {
  if (d.dev.type == 1) {
    nb::gil_scoped_release release;
    d.backend->verify(a.batch, a.out);  // validates (host memory)
    return;
  }
#ifdef SPARKDRAFT_HAVE_CUDA
  nb::gil_scoped_release release;
  DeviceGuard guard(d.dev.id);
  gpu_verify(*d.gpu, d, a, reinterpret_cast<cudaStream_t>(stream), validate);
#else
  (void)stream;
  (void)validate;
#endif
}

// ---- the bind-once form ---------------------------------------------------------------

struct PyBound {
  nb::object draft_owner;  // keeps the draft alive
  PyDraft* draft = nullptr;
  std::vector<Array> inputs;  // the bound arrays, kept alive (their owners too)
  std::vector<OutArray> outputs;
  bool has_propose = false, has_context = false;
  ProposeArgs propose;  // pointers of the bound buffers; rows = their capacity
  ContextBatch context;
  bool has_verify = false;
  VerifyArgs verify;

  void run_verify_rows(int rows, uintptr_t stream) {
    if (!has_verify) throw InvalidArgument("Bound.verify: no verify buffers were bound");
    if (rows < 1 || rows > verify.batch.num_rows)
      throw InvalidArgument("Bound.verify: num_rows " + std::to_string(rows) + " is outside [1, " +
                            std::to_string(verify.batch.num_rows) + "] (the bound buffers' rows)");
    VerifyArgs a = verify;
    a.batch.num_rows = rows;
    run_verify(*draft, a, stream, /*validate=*/false);
  }

  void run_propose_rows(int rows, uintptr_t stream) {
    if (!has_propose) throw InvalidArgument("Bound.propose: no propose buffers were bound");
    if (rows < 1 || rows > propose.batch.num_rows)
      throw InvalidArgument("Bound.propose: num_rows " + std::to_string(rows) + " is outside [1, " +
                            std::to_string(propose.batch.num_rows) + "] (the bound buffers' rows)");
    ProposeArgs a = propose;
    a.batch.num_rows = rows;
    // Bound buffers are the hot path: values are the caller's to keep in range on the
    // GPU (as the C++ device API says); the CPU backend's host API checks them anyway.
    run_propose(*draft, a, stream, /*validate=*/false, /*graphed=*/true);
  }

  void run_context_tokens(int tokens, uintptr_t stream) {
    if (!has_context) throw InvalidArgument("Bound.store_context: no context buffers were bound");
    if (tokens < 0 || tokens > context.num_tokens)
      throw InvalidArgument("Bound.store_context: num_tokens " + std::to_string(tokens) +
                            " is outside [0, " + std::to_string(context.num_tokens) +
                            "] (the bound buffers' tokens)");
    ContextBatch b = context;
    b.num_tokens = tokens;
    run_store_context(*draft, b, stream, /*validate=*/false);
  }
};

// ---- the scenario trace (Python's view vs the C++ API's) ------------------------------

// Forwards every call to `inner` and records store_context and propose inputs and
// outputs as host copies (what a Python replay feeds back through the DLPack path).
class RecordingBackend final : public DraftBackend {
 public:
  explicit RecordingBackend(DraftBackend& inner) : inner_(inner) {}
  nb::list steps;  // built with the GIL held (the scenario runs with it)

  std::string name() const override { return inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  const DraftOptions& options() const override { return inner_.options(); }
  StageTimings last_timings() const override { return inner_.last_timings(); }
  std::vector<bf16> kv_cache(int layer) const override { return inner_.kv_cache(layer); }
  const StepPlan& plan() const override { return inner_.plan(); }

  void store_context(const ContextBatch& b) override {
    const ModelConfig& c = config();
    const size_t T = static_cast<size_t>(b.num_tokens);
    const size_t W = static_cast<size_t>(c.taps()) * c.target_hidden_size;
    nb::dict s;
    s["kind"] = "store_context";
    s["hidden"] = bf16_bits(std::vector<bf16>(b.hidden, b.hidden + T * W), {T, W});
    s["positions"] = to_numpy(std::vector<int64_t>(b.positions, b.positions + T), {T});
    s["slots"] = to_numpy(std::vector<int64_t>(b.slots, b.slots + T), {T});
    inner_.store_context(b);
    steps.append(s);
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) override {
    const ModelConfig& c = config();
    const size_t R = static_cast<size_t>(b.num_rows), N = c.block_size, V = c.vocab_size;
    const size_t P = static_cast<size_t>(options().max_pages_per_req);
    nb::dict s;
    s["kind"] = "propose";
    s["anchor_tokens"] = to_numpy(std::vector<int64_t>(b.anchor_tokens, b.anchor_tokens + R), {R});
    s["anchor_positions"] =
        to_numpy(std::vector<int64_t>(b.anchor_positions, b.anchor_positions + R), {R});
    s["seeds"] = to_numpy(std::vector<int64_t>(b.seeds, b.seeds + R), {R});
    s["temperatures"] = to_numpy(std::vector<float>(b.temperatures, b.temperatures + R), {R});
    s["cache_slots"] = to_numpy(std::vector<int64_t>(b.cache_slots, b.cache_slots + R), {R});
    s["block_tables"] =
        to_numpy(std::vector<int32_t>(b.block_tables, b.block_tables + R * P), {R, P});
    inner_.propose(b, out);
    s["tokens"] =
        to_numpy(std::vector<int64_t>(out.draft_tokens, out.draft_tokens + R * N), {R, N});
    // The cache rows of the slots used (the rest of the caller's cache is not ours).
    std::vector<bf16> rows;
    for (size_t r = 0; r < R; ++r) {
      if (b.cache_slots[r] < 0) continue;
      const bf16* p = out.draft_logits + static_cast<size_t>(b.cache_slots[r]) * N * V;
      rows.insert(rows.end(), p, p + N * V);
    }
    s["logits"] = bf16_bits(rows, {rows.size() / (N * V), N, V});
    steps.append(s);
  }

 private:
  DraftBackend& inner_;
};

nb::dict options_dict(const DraftOptions& o) {
  nb::dict d;
  d["max_reqs"] = o.max_reqs;
  d["num_pages"] = o.num_pages;
  d["page_size"] = o.page_size;
  d["max_pages_per_req"] = o.max_pages_per_req;
  d["cache_slots"] = o.cache_slots;
  d["tp"] = o.tp;
  return d;
}

// Runs the scenario of `sparkdraft check` / the demo (runtime/scenario.h) on a fresh
// CPU backend through the C++ API and returns every call it made, with the outputs
// and the final KV caches.
nb::dict scenario_trace(const PyCheckpoint& ck, const std::vector<int>& request_ids,
                        const std::vector<int>& padding_before, int rounds, uint64_t seed) {
  ScenarioOptions s;
  s.request_ids = request_ids;
  s.padding_before = padding_before;
  s.rounds = rounds;
  s.seed = seed;
  const ModelConfig& c = ck.ckpt->config();
  const DraftOptions o = scenario_draft_options(c, s);
  auto backend = make_cpu_backend(ck.ckpt, o);
  RecordingBackend rec(*backend);
  run_scenario(rec, s);
  nb::list kv;
  const size_t slots = static_cast<size_t>(o.num_pages) * o.page_size;
  for (int l = 0; l < c.num_layers; ++l)
    kv.append(bf16_bits(backend->kv_cache(l),
                        {slots, static_cast<size_t>(c.num_kv_heads), 2 * size_t(c.head_dim)}));
  nb::dict out;
  out["options"] = options_dict(o);
  out["steps"] = rec.steps;
  out["kv_caches"] = kv;
  return out;
}

nb::list plan_list(const StepPlan& p) {
  nb::list parts;
  for (const PlanPart& x : p.parts) {
    nb::dict d;
    d["part"] = x.part;
    d["variant"] = x.variant;
    d["reason"] = x.reason;
    parts.append(d);
  }
  return parts;
}

// The schedulers' input (sparkdraft/schedule.h): host confidences [rows, N] float32.
using HostConfidences = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

int dim_of(const HostConfidences& c, int axis) {
  if (c.shape(axis) > static_cast<size_t>(INT32_MAX))
    throw InvalidArgument("confidences: too many rows or steps");
  return static_cast<int>(c.shape(axis));
}

}  // namespace
}  // namespace sparkdraft::python

NB_MODULE(_core, m) {
  using namespace sparkdraft;
  using namespace sparkdraft::python;
  m.doc() = "sparkdraft's C++ runtime (see the sparkdraft package and docs/python.md)";
  register_errors(m);
  m.attr("__version__") = SPARKDRAFT_VERSION_STRING;
#ifdef SPARKDRAFT_HAVE_CUDA
  m.attr("HAVE_CUDA") = true;
  // Whether verify runs on the GPU (CudaDraft::verify_device): capturable, no copies.
  m.attr("HAVE_GPU_VERIFY") = has_verify_device<cuda::CudaDraft>();
#else
  m.attr("HAVE_CUDA") = false;
  m.attr("HAVE_GPU_VERIFY") = false;
#endif
  m.def("cuda_available", [] {
#ifdef SPARKDRAFT_HAVE_CUDA
    return cuda::cuda_available();
#else
    return false;
#endif
  });

  // Configs and synthetic checkpoints (our JSON form as a string; the package parses it).
  m.def(
      "preset_config",
      [](const std::string& preset, const std::string& style) {
        return config_to_json(preset_config(preset, style)).dump();
      },
      "preset"_a, "style"_a = "");
  m.def("preset_names", &preset_names);
  m.def(
      "write_checkpoint",
      [](const std::string& config_json, const std::string& dir, uint64_t seed, bool hf_config) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(config_json);
        } catch (const nlohmann::json::exception& e) {
          throw ConfigError(std::string("make_checkpoint: config is not JSON: ") + e.what());
        }
        const ModelConfig c = config_from_json(j);
        c.validate();
        SyntheticOptions so;
        so.seed = seed;
        so.hf_config = hf_config;
        nb::gil_scoped_release release;
        write_synthetic_checkpoint(c, dir, so);
      },
      "config_json"_a, "dir"_a, "seed"_a = 1, "hf_config"_a = true);

  nb::class_<PyCheckpoint>(m, "Checkpoint")
      .def(
          "__init__",
          [](PyCheckpoint* self, const std::string& dir, bool allow_nonfinite,
             const std::string& target_model) {
            LoadOptions lo;
            lo.allow_nonfinite = allow_nonfinite;
            lo.target_dir = target_model;
            std::shared_ptr<const Checkpoint> ck;
            {
              nb::gil_scoped_release release;
              ck = std::make_shared<const Checkpoint>(Checkpoint::load(dir, lo));
            }
            new (self) PyCheckpoint{std::move(ck)};
          },
          "dir"_a, "allow_nonfinite"_a = false, "target_model"_a = "")
      .def("config_json",
           [](const PyCheckpoint& c) { return config_to_json(c.ckpt->config()).dump(); })
      .def_prop_ro("dir", [](const PyCheckpoint& c) { return c.ckpt->dir(); })
      .def_prop_ro("total_bytes", [](const PyCheckpoint& c) { return c.ckpt->total_bytes(); })
      .def(
          "cpu_plan",
          [](const PyCheckpoint& c, int tp) { return plan_list(cpu_plan(c.ckpt->config(), tp)); },
          "tp"_a = 1);

  nb::class_<PyDraft>(m, "Draft")
      .def(
          "__init__",
          [](PyDraft* self, const PyCheckpoint& ck, const std::string& device_type, int device_id,
             int max_reqs, int num_pages, int page_size, int max_pages_per_req, int cache_slots,
             int tp, int threads, int max_context_tokens, bool cuda_graph, bool validate,
             const std::vector<Array>& kv_caches) {
            DraftOptions o;
            o.max_reqs = max_reqs;
            o.num_pages = num_pages;
            o.page_size = page_size;
            o.max_pages_per_req = max_pages_per_req;
            o.cache_slots = cache_slots;
            o.tp = tp;
            o.threads = threads;
            auto d = make_draft(ck, device_type, device_id, o, max_context_tokens, cuda_graph,
                                validate, kv_caches);
            new (self) PyDraft(std::move(*d));
          },
          "checkpoint"_a, "device_type"_a, "device_id"_a, "max_reqs"_a, "num_pages"_a,
          "page_size"_a, "max_pages_per_req"_a, "cache_slots"_a, "tp"_a, "threads"_a,
          "max_context_tokens"_a, "cuda_graph"_a, "validate"_a, "kv_caches"_a)
      .def_prop_ro("backend", [](const PyDraft& d) { return d.backend->name(); })
      .def_prop_ro("device", [](const PyDraft& d) { return d.dev.text(); })
      .def("options", [](const PyDraft& d) { return options_dict(d.options()); })
      .def("config_json", [](const PyDraft& d) { return config_to_json(d.config()).dump(); })
      .def("plan", [](const PyDraft& d) { return plan_list(d.backend->plan()); })
      .def("last_timings",
           [](const PyDraft& d) {
             const StageTimings t = d.backend->last_timings();
             nb::dict r;
             r["context_ms"] = t.context_ms;
             r["embed_ms"] = t.embed_ms;
             r["backbone_ms"] = t.backbone_ms;
             r["lm_head_ms"] = t.lm_head_ms;
             r["markov_ms"] = t.markov_ms;
             r["graph_ms"] = t.graph_ms;
             r["total_ms"] = t.total_ms();
             return r;
           })
      .def(
          "store_context",
          [](PyDraft& d, const Array& hidden, const Array& positions, const Array& slots,
             uintptr_t stream) {
            const ContextBatch b = check_context(d, "store_context", hidden, positions, slots);
            run_store_context(d, b, stream, d.validate);
          },
          "hidden"_a, "positions"_a, "slots"_a, "stream"_a)
      .def(
          "propose",
          [](PyDraft& d, const Array& anchor_tokens, const Array& anchor_positions,
             const Array& seeds, const Array& temperatures, const Array& cache_slots,
             const Array& block_tables, const OutArray& out_tokens,
             const OutArray& out_draft_logits, uintptr_t stream, nb::object out_confidences,
             nb::object lengths) {
            // The confidence head's output (contract.md section 9): [rows, N] float32.
            OutArray conf;
            if (!out_confidences.is_none()) conf = nb::cast<OutArray>(out_confidences);
            // Per-request lengths (contract.md 9.5): [rows] int32.
            Array len;
            if (!lengths.is_none()) len = nb::cast<Array>(lengths);
            const ProposeArgs a = check_propose(
                d, "propose", anchor_tokens, anchor_positions, seeds, temperatures, cache_slots,
                block_tables, out_tokens, out_draft_logits,
                out_confidences.is_none() ? nullptr : &conf, lengths.is_none() ? nullptr : &len);
            run_propose(d, a, stream, d.validate, /*graphed=*/false);
          },
          "anchor_tokens"_a, "anchor_positions"_a, "seeds"_a, "temperatures"_a, "cache_slots"_a,
          "block_tables"_a, "out_tokens"_a, "out_draft_logits"_a, "stream"_a,
          "out_confidences"_a = nb::none(), "lengths"_a = nb::none())
      // A zero-copy view of one layer's KV cache [slots, kv_heads, 2 * head_dim] bf16
      // (uint16 bits with as_bits, for numpy), kept alive by (and keeping alive) the draft.
      .def(
          "kv_cache_view",
          [](nb::handle self_h, int layer, bool as_bits) {
            PyDraft& d = nb::cast<PyDraft&>(self_h);
            bf16* p = d.backend->kv_cache_data(layer);
            const std::vector<int64_t> s = d.kv_shape();
            const size_t shape[3] = {size_t(s[0]), size_t(s[1]), size_t(s[2])};
            const nb::dlpack::dtype dt =
                as_bits ? nb::dtype<uint16_t>()
                        : nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1};
            return nb::ndarray<>(static_cast<void*>(p), 3, shape, self_h, nullptr, dt, d.dev.type,
                                 d.dev.id);
          },
          "layer"_a, "as_bits"_a = false)
      .def(
          "kv_cache_copy",
          [](const PyDraft& d, int layer) {
            std::vector<bf16> v;
            {
              nb::gil_scoped_release release;
#ifdef SPARKDRAFT_HAVE_CUDA
              if (d.gpu) {  // after whatever the caller's streams queued (a host copy)
                DeviceGuard guard(d.dev.id);
                cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
              }
#endif
              v = d.backend->kv_cache(layer);
            }
            const std::vector<int64_t> s = d.kv_shape();
            return bf16_bits(v, {size_t(s[0]), size_t(s[1]), size_t(s[2])});
          },
          "layer"_a)
      .def(
          "bind",
          [](nb::handle self_h, nb::object anchor_tokens, nb::object anchor_positions,
             nb::object seeds, nb::object temperatures, nb::object cache_slots,
             nb::object block_tables, nb::object out_tokens, nb::object out_draft_logits,
             nb::object hidden, nb::object positions, nb::object slots, nb::object target_logits,
             nb::object out_num_accepted, nb::object out_verified, nb::object top_k,
             nb::object top_p, nb::object lengths, const std::string& method) {
            PyDraft& d = nb::cast<PyDraft&>(self_h);
            auto b = std::make_unique<PyBound>();
            b->draft_owner = nb::borrow(self_h);
            b->draft = &d;
            const bool any_propose = !anchor_tokens.is_none() || !out_tokens.is_none();
            if (any_propose) {
              std::vector<Array> in;
              for (nb::handle h : {anchor_tokens, anchor_positions, seeds, temperatures,
                                   cache_slots, block_tables}) {
                if (h.is_none())
                  throw InvalidArgument("bind: give every propose buffer or none of them");
                in.push_back(nb::cast<Array>(h));
              }
              if (out_tokens.is_none() || out_draft_logits.is_none())
                throw InvalidArgument("bind: give every propose buffer or none of them");
              const OutArray ot = nb::cast<OutArray>(out_tokens),
                             ol = nb::cast<OutArray>(out_draft_logits);
              b->propose =
                  check_propose(d, "bind", in[0], in[1], in[2], in[3], in[4], in[5], ot, ol);
              b->inputs.insert(b->inputs.end(), in.begin(), in.end());
              b->outputs = {ot, ol};
              b->has_propose = true;
            }
            if (!hidden.is_none() || !positions.is_none() || !slots.is_none()) {
              if (hidden.is_none() || positions.is_none() || slots.is_none())
                throw InvalidArgument("bind: give hidden, positions and slots together");
              const Array h = nb::cast<Array>(hidden), p = nb::cast<Array>(positions),
                          s = nb::cast<Array>(slots);
              b->context = check_context(d, "bind", h, p, s);
              b->inputs.insert(b->inputs.end(), {h, p, s});
              b->has_context = true;
            }
            if (!target_logits.is_none() || !out_num_accepted.is_none() ||
                !out_verified.is_none()) {
              if (!b->has_propose || target_logits.is_none() || out_num_accepted.is_none() ||
                  out_verified.is_none())
                throw InvalidArgument(
                    "bind: verify needs the propose buffers and target_logits, "
                    "out_num_accepted and out_verified");
              const Array tl = nb::cast<Array>(target_logits);
              const OutArray na = nb::cast<OutArray>(out_num_accepted),
                             vt = nb::cast<OutArray>(out_verified);
              std::optional<Array> k, p, l;
              if (!top_k.is_none()) k = nb::cast<Array>(top_k);
              if (!top_p.is_none()) p = nb::cast<Array>(top_p);
              if (!lengths.is_none()) l = nb::cast<Array>(lengths);
              // Verify reads the bound propose buffers: the drafts, positions, seeds,
              // temperatures, slots and the draft-logits cache.
              const Array drafts{b->outputs[0]}, cache{b->outputs[1]};
              b->verify = check_verify(d, "bind", drafts, b->inputs[1], b->inputs[2], b->inputs[3],
                                       b->inputs[4], cache, tl, na, vt, k ? &*k : nullptr,
                                       p ? &*p : nullptr, l ? &*l : nullptr, method);
              b->inputs.push_back(tl);
              if (k) b->inputs.push_back(*k);
              if (p) b->inputs.push_back(*p);
              if (l) b->inputs.push_back(*l);
              b->outputs.insert(b->outputs.end(), {na, vt});
              b->has_verify = true;
            }
            if (!b->has_propose && !b->has_context)
              throw InvalidArgument(
                  "bind: nothing to bind (give the propose buffers, the "
                  "context buffers, or both)");
            return b.release();
          },
          "anchor_tokens"_a = nb::none(), "anchor_positions"_a = nb::none(), "seeds"_a = nb::none(),
          "temperatures"_a = nb::none(), "cache_slots"_a = nb::none(),
          "block_tables"_a = nb::none(), "out_tokens"_a = nb::none(),
          "out_draft_logits"_a = nb::none(), "hidden"_a = nb::none(), "positions"_a = nb::none(),
          "slots"_a = nb::none(), "target_logits"_a = nb::none(), "out_num_accepted"_a = nb::none(),
          "out_verified"_a = nb::none(), "top_k"_a = nb::none(), "top_p"_a = nb::none(),
          "lengths"_a = nb::none(), "method"_a = "standard", nb::rv_policy::take_ownership)
      .def(
          "verify",
          [](PyDraft& d, const Array& draft_tokens, const Array& anchor_positions,
             const Array& seeds, const Array& temperatures, const Array& cache_slots,
             const Array& draft_logits, const Array& target_logits,
             const OutArray& out_num_accepted, const OutArray& out_tokens, nb::object top_k,
             nb::object top_p, nb::object lengths, const std::string& method, uintptr_t stream) {
            std::optional<Array> k, p, l;
            if (!top_k.is_none()) k = nb::cast<Array>(top_k);
            if (!top_p.is_none()) p = nb::cast<Array>(top_p);
            if (!lengths.is_none()) l = nb::cast<Array>(lengths);
            const VerifyArgs a =
                check_verify(d, "verify", draft_tokens, anchor_positions, seeds, temperatures,
                             cache_slots, draft_logits, target_logits, out_num_accepted, out_tokens,
                             k ? &*k : nullptr, p ? &*p : nullptr, l ? &*l : nullptr, method);
            run_verify(d, a, stream, d.validate);
          },
          "draft_tokens"_a, "anchor_positions"_a, "seeds"_a, "temperatures"_a, "cache_slots"_a,
          "draft_logits"_a, "target_logits"_a, "out_num_accepted"_a, "out_tokens"_a,
          "top_k"_a = nb::none(), "top_p"_a = nb::none(), "lengths"_a = nb::none(),
          "method"_a = "standard", "stream"_a = 0);

  nb::class_<PyBound>(m, "Bound")
      .def(
          "propose",
          [](PyBound& b, int rows, uintptr_t stream) { b.run_propose_rows(rows, stream); },
          "num_rows"_a, "stream"_a)
      .def(
          "verify", [](PyBound& b, int rows, uintptr_t stream) { b.run_verify_rows(rows, stream); },
          "num_rows"_a, "stream"_a)
      .def(
          "store_context",
          [](PyBound& b, int tokens, uintptr_t stream) { b.run_context_tokens(tokens, stream); },
          "num_tokens"_a, "stream"_a)
      .def_prop_ro("max_rows",
                   [](const PyBound& b) { return b.has_propose ? b.propose.batch.num_rows : 0; })
      .def_prop_ro("max_tokens",
                   [](const PyBound& b) { return b.has_context ? b.context.num_tokens : 0; });

  // Adaptive draft length (contract.md section 9): lengths per row.
  m.def(
      "threshold_lengths",
      [](const HostConfidences& c, float threshold) {
        std::vector<int> n(c.shape(0));
        threshold_lengths(c.data(), dim_of(c, 0), dim_of(c, 1), threshold, n.data());
        return n;
      },
      "confidences"_a, "threshold"_a);
  m.def(
      "survival_greedy_lengths",
      [](const HostConfidences& c, const std::vector<double>& sps) {
        std::vector<int> n(c.shape(0));
        survival_greedy_lengths(c.data(), dim_of(c, 0), dim_of(c, 1), sps, n.data());
        return n;
      },
      "confidences"_a, "sps"_a);
  m.def(
      "survival_capacity",
      [](const HostConfidences& c, const std::vector<double>& sps) {
        return survival_capacity(c.data(), dim_of(c, 0), dim_of(c, 1), sps);
      },
      "confidences"_a, "sps"_a);
  m.def(
      "survival_admit",
      [](const HostConfidences& c, int64_t capacity) {
        std::vector<int> n(c.shape(0));
        survival_admit(c.data(), dim_of(c, 0), dim_of(c, 1), capacity, n.data());
        return n;
      },
      "confidences"_a, "capacity"_a);
  nb::class_<LaggedSurvivalScheduler>(m, "LaggedSurvivalScheduler")
      .def(nb::init<std::vector<double>, int64_t>(), "sps"_a, "initial_capacity"_a)
      .def(
          "schedule",
          [](LaggedSurvivalScheduler& s, const HostConfidences& c) {
            std::vector<int> n(c.shape(0));
            s.schedule(c.data(), dim_of(c, 0), dim_of(c, 1), n.data());
            return n;
          },
          "confidences"_a)
      .def_prop_ro("last_capacity", &LaggedSurvivalScheduler::last_capacity)
      .def_prop_ro("step", &LaggedSurvivalScheduler::step);

  m.def("scenario_trace", &scenario_trace, "checkpoint"_a, "request_ids"_a, "padding_before"_a,
        "rounds"_a, "seed"_a);
}
