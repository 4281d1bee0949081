// Array views of the builder's buffers, with their element type.
#pragma once

#include <cstdint>
#include <string>

#include "linmeta/error.hpp"

namespace linmeta {

/// Element types of output arrays (vLLM's dtypes: torch.bool, torch.int32, torch.int64).
enum class DType : int32_t { Bool, Int32, Int64 };

[[nodiscard]] constexpr int32_t dtype_size(DType d) {
  return d == DType::Bool ? 1 : d == DType::Int32 ? 4 : 8;
}
[[nodiscard]] constexpr const char* dtype_name(DType d) {
  return d == DType::Bool ? "bool" : d == DType::Int32 ? "int32" : "int64";
}

template <class T>
[[nodiscard]] constexpr DType dtype_of() {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8, "bool, int32 or int64");
  return sizeof(T) == 1 ? DType::Bool : sizeof(T) == 4 ? DType::Int32 : DType::Int64;
}

/// A view of a 1-D or 2-D array. `present == false` is the reference's None; a
/// present array may be empty. Memory is the builder's target memory unless the
/// field's comment says host.
struct Array {
  const void* data = nullptr;
  DType dtype = DType::Int32;
  int64_t rows = 0;  ///< first dimension
  int32_t cols = 1;  ///< second dimension (1 for 1-D arrays)
  int32_t ndim = 1;  ///< 1 or 2
  bool present = false;

#if __cplusplus >= 202002L  // the CUDA kernels compile this header as C++17
  bool operator==(const Array&) const = default;
#endif
  [[nodiscard]] int64_t size() const { return rows * cols; }
  [[nodiscard]] int64_t bytes() const { return size() * dtype_size(dtype); }
  explicit operator bool() const { return present; }

  /// Typed pointer; throws linmeta::Error when T is not the array's element type.
  template <class T>
  [[nodiscard]] const T* as() const {
    if (dtype_of<T>() != dtype)
      throw Error(std::string("linmeta: array of ") + dtype_name(dtype) + " read as " +
                  dtype_name(dtype_of<T>()));
    return static_cast<const T*>(data);
  }
  /// Element i as int64 (host memory only).
  [[nodiscard]] int64_t at(int64_t i) const {
    switch (dtype) {
      case DType::Bool:
        return static_cast<const bool*>(data)[i] ? 1 : 0;
      case DType::Int32:
        return static_cast<const int32_t*>(data)[i];
      case DType::Int64:
        break;
    }
    return static_cast<const int64_t*>(data)[i];
  }
};

}  // namespace linmeta
