// Typed errors of the library. Library code throws; only tools (the CLI) exit.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace sparkdraft {

// Base of every error sparkdraft throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model config (ours or an imported config.json) that is malformed or unsupported.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A checkpoint file or tensor that is missing, malformed or does not match the config.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Bad input refused at the API boundary (sizes, ids, slots, temperature, ...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file-system operation that failed or was refused: an output that exists,
// a directory that cannot be created, a missing temporary directory, ...
class IoError : public Error {
 public:
  using Error::Error;
};

// A capability this build or machine lacks: the CUDA backend (built without
// nvcc) or a usable CUDA GPU.
class Unavailable : public Error {
 public:
  using Error::Error;
};

// A CUDA / NCCL call that failed (see cuda/check.h for the macros).
class DeviceError : public Error {
 public:
  using Error::Error;
};

// The error `e` with `prefix` before its message and its type kept (the typed
// errors above; any other std::exception becomes an Error; anything else is
// returned unchanged): how a group of ranks reports which rank failed.
inline std::exception_ptr prefixed_error(const std::exception_ptr& e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const ConfigError& x) {
    return std::make_exception_ptr(ConfigError(prefix + x.what()));
  } catch (const CheckpointError& x) {
    return std::make_exception_ptr(CheckpointError(prefix + x.what()));
  } catch (const InvalidArgument& x) {
    return std::make_exception_ptr(InvalidArgument(prefix + x.what()));
  } catch (const IoError& x) {
    return std::make_exception_ptr(IoError(prefix + x.what()));
  } catch (const Unavailable& x) {
    return std::make_exception_ptr(Unavailable(prefix + x.what()));
  } catch (const DeviceError& x) {
    return std::make_exception_ptr(DeviceError(prefix + x.what()));
  } catch (const std::exception& x) {
    return std::make_exception_ptr(Error(prefix + x.what()));
  } catch (...) {
    return e;
  }
}

}  // namespace sparkdraft
