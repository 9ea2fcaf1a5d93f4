// The XLA FFI handlers this extension registers, and what the Python side reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace t5forge_kernels {

XLA_FFI_DECLARE_HANDLER_SYMBOL(Bf16Matmul);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Int8Matmul);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PackedInt8Matmul);
XLA_FFI_DECLARE_HANDLER_SYMBOL(PackedInt8Dense);

// Bytes of int8 [k, n] weights in oneDNN's blocked layout for this CPU (with the compensation
// that signed sources need), and the packing itself, done once at load.
size_t packed_int8_size(int64_t k, int64_t n);
void pack_int8_weights(const int8_t* weights, int64_t k, int64_t n, uint8_t* packed);

// The version of the oneDNN library loaded at run time.
std::string onednn_version();

}  // namespace t5forge_kernels
