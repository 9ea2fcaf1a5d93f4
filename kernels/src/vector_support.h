// What the handlers share for their element-wise loops: bfloat16 conversions rounded as XLA's
// convert rounds, and the function-clone attribute that builds a loop for the widest vectors
// the CPU has.
#pragma once

#include <cstdint>
#include <cstring>

namespace t5forge_kernels {

// Builds the function for AVX-512, AVX2 and the baseline, picked once at load (an ifunc: ELF
// on x86-64 Linux; elsewhere the plain function).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define T5FORGE_WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define T5FORGE_WIDEST_VECTORS
#endif

inline uint16_t to_bf16(float value) {  // round to nearest even, as XLA's convert does
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float from_bf16(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

}  // namespace t5forge_kernels
