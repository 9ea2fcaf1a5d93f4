// The decoding step's attention as an XLA FFI handler (decode_attention.cc).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace t5forge_kernels {

XLA_FFI_DECLARE_HANDLER_SYMBOL(DecodeAttention);

// The lanes of the build the handler runs (16: AVX-512, 8: AVX2 + FMA, 4: baseline), the
// widest this CPU has unless set; setting one the CPU lacks throws std::invalid_argument.
int decode_attention_lanes();
int set_decode_attention_lanes(int lanes);

}  // namespace t5forge_kernels
