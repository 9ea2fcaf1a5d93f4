// An operand's shape as text, for the handlers' error messages.
#pragma once

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace t5forge_kernels {

inline std::string shape_text(xla::ffi::Span<const int64_t> dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace t5forge_kernels
