// The decoding step's attention as an XLA FFI handler (decode_attention.cc).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace t5forge_kernels {

XLA_FFI_DECLARE_HANDLER_SYMBOL(DecodeAttention);

}  // namespace t5forge_kernels
