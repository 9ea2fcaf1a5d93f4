// int8 x int8 -> int32 products of few rows (decoding's) on AMX tiles, straight from the weights
// oneDNN packed for AMX: oneDNN 3.2's matmul took 1.2-1.7x as long on these shapes (see
// amx_int8_product.cc).
#pragma once

#include <cstdint>

namespace t5forge_kernels {

// Products of up to this many rows take the AMX kernel.
constexpr int64_t kAmxMaxRows = 32;

// Whether this CPU has AMX int8 and the OS lets this process use its tiles (asked once).
bool amx_int8_usable();

// Whether the AMX kernel is on: usable, and not switched off (T5FORGE_AMX_INT8=0 at load, or
// set_amx_int8_enabled). Returns the previous setting.
bool amx_int8_enabled();
bool set_amx_int8_enabled(bool enabled);

// x int8 [m, k] row-major (m <= kAmxMaxRows) times int8 weights [k, n] in oneDNN's AMX layout
// (BA16a64b4a: [n/64][k/64][16][64][4], zero padded to multiples of 64) into out int32 [m, n].
void amx_int8_product(const int8_t* x, int64_t m, int64_t k, const int8_t* packed, int64_t n,
                      int32_t* out);

}  // namespace t5forge_kernels
