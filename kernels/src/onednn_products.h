// The XLA FFI handlers this extension registers, and what the Python side reports.
#pragma once

#include <string>

#include "xla/ffi/api/ffi.h"

namespace t5forge_kernels {

XLA_FFI_DECLARE_HANDLER_SYMBOL(Bf16Matmul);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Int8Matmul);

// The version of the oneDNN library loaded at run time.
std::string onednn_version();

}  // namespace t5forge_kernels
