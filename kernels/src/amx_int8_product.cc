// int8 products of few rows on AMX, reading the weights in the layout oneDNN packed them in.
//
// Decoding multiplies 1-32 rows by each weight matrix, so its int8 products stream the weights
// once and do little else. oneDNN 3.2's AMX matmul spent 1.2-1.7x as long as this kernel on T5
// 1.1 small's 49 decoder products (M = 1, 8, 16, 32; 38 MB of weights a step, the cache evicted
// between steps; Intel Xeon with AMX, 2 cores): docs/cpu-kernels.md. A 64-column stripe of the packed
// weights is four 16-column AMX B tiles side by side (rows 256 bytes apart), so the kernel keeps
// the stripe's four (or, past 16 rows, two by two) int32 tiles and runs the contraction through
// them 64 at a time: s8 x s8 sums, exact, no compensation.
#include "amx_int8_product.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define T5FORGE_HAS_AMX_CODE 1
#define T5FORGE_AMX __attribute__((target("amx-tile,amx-int8")))
#endif

namespace t5forge_kernels {
namespace {

constexpr int64_t kBlock = 64;                       // columns per stripe, contraction per step
constexpr int64_t kBlockBytes = kBlock * kBlock;     // one packed [64 k, 64 n] block
constexpr int64_t kRowBytes = 4 * kBlock;            // one tile row: 4 k of 64 columns
constexpr int64_t kTileRows = 16;
// Below this many weight bytes a thread's share would take about as long as waking the other
// OpenMP thread.
constexpr int64_t kBytesPerThread = 64 * 1024;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::atomic<bool>& switched_on() {
  static std::atomic<bool> on([] {
    const char* value = std::getenv("T5FORGE_AMX_INT8");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }());
  return on;
}

#ifdef T5FORGE_HAS_AMX_CODE

// The layout ldtilecfg reads (palette 1).
struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};

  void set(int tile, int64_t tile_rows) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    bytes_per_row[tile] = 64;
  }
};

// _tile_stored names its tile in the instruction text, so the number must be a literal.
T5FORGE_AMX inline void store_whole_tile(int tile, int32_t* destination, int64_t stride_bytes) {
  switch (tile) {
    case 0: _tile_stored(0, destination, stride_bytes); break;
    case 1: _tile_stored(1, destination, stride_bytes); break;
    case 2: _tile_stored(2, destination, stride_bytes); break;
    default: _tile_stored(3, destination, stride_bytes); break;
  }
}

// Stores int32 tile `tile` (`rows` x 16) at out[:, column:], keeping to the n columns there are.
T5FORGE_AMX void store_tile(int tile, int32_t* out, int64_t rows, int64_t column, int64_t n) {
  if (column + 16 <= n) {
    store_whole_tile(tile, out + column, n * 4);
  } else if (column < n) {
    alignas(64) int32_t whole[kTileRows * 16];
    store_whole_tile(tile, whole, 64);
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(out + i * n + column, whole + i * 16, (n - column) * sizeof(int32_t));
    }
  }
}

// Up to 16 rows: tiles 0-3 sum the stripe's four 16-column tiles, 4 holds x's 64 k, 6 and 7 the
// weights.
T5FORGE_AMX void few_rows(const int8_t* x, int64_t k_padded, int64_t m, const int8_t* packed,
                          int64_t n, int32_t* out, int64_t first, int64_t last) {
  TileConfig config;
  for (int tile = 0; tile < 4; ++tile) config.set(tile, m);
  config.set(4, m);
  config.set(6, kTileRows);
  config.set(7, kTileRows);
  _tile_loadconfig(&config);
  for (int64_t stripe = first; stripe < last; ++stripe) {
    const int8_t* weights = packed + stripe * k_padded * kBlock;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t block = 0; block < k_padded / kBlock; ++block) {
      const int8_t* b = weights + block * kBlockBytes;
      _tile_loadd(4, x + block * kBlock, k_padded);
      _tile_loadd(6, b, kRowBytes);
      _tile_dpbssd(0, 4, 6);
      _tile_loadd(7, b + 64, kRowBytes);
      _tile_dpbssd(1, 4, 7);
      _tile_loadd(6, b + 128, kRowBytes);
      _tile_dpbssd(2, 4, 6);
      _tile_loadd(7, b + 192, kRowBytes);
      _tile_dpbssd(3, 4, 7);
    }
    const int64_t column = stripe * kBlock;
    store_tile(0, out, m, column, n);
    store_tile(1, out, m, column + 16, n);
    store_tile(2, out, m, column + 32, n);
    store_tile(3, out, m, column + 48, n);
  }
  _tile_release();
}

// 17-32 rows: each half stripe (32 columns) in tiles 0-1 (rows 0-15) and 2-3 (the rest), x's
// two row blocks in 4 and 5, the weights in 6 and 7.
T5FORGE_AMX void more_rows(const int8_t* x, int64_t k_padded, int64_t m, const int8_t* packed,
                           int64_t n, int32_t* out, int64_t first, int64_t last) {
  const int64_t rest = m - kTileRows;
  TileConfig config;
  config.set(0, kTileRows);
  config.set(1, kTileRows);
  config.set(2, rest);
  config.set(3, rest);
  config.set(4, kTileRows);
  config.set(5, rest);
  config.set(6, kTileRows);
  config.set(7, kTileRows);
  _tile_loadconfig(&config);
  const int8_t* x_rest = x + kTileRows * k_padded;
  int32_t* out_rest = out + kTileRows * n;
  for (int64_t stripe = first; stripe < last; ++stripe) {
    const int8_t* weights = packed + stripe * k_padded * kBlock;
    for (int64_t half = 0; half < 2; ++half) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t block = 0; block < k_padded / kBlock; ++block) {
        const int8_t* b = weights + block * kBlockBytes + half * 128;
        _tile_loadd(4, x + block * kBlock, k_padded);
        _tile_loadd(5, x_rest + block * kBlock, k_padded);
        _tile_loadd(6, b, kRowBytes);
        _tile_loadd(7, b + 64, kRowBytes);
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      }
      const int64_t column = stripe * kBlock + half * 32;
      store_tile(0, out, kTileRows, column, n);
      store_tile(1, out, kTileRows, column + 16, n);
      store_tile(2, out_rest, rest, column, n);
      store_tile(3, out_rest, rest, column + 16, n);
    }
  }
  _tile_release();
}

bool cpu_has_amx_int8() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return ((edx >> 24) & 1) && ((edx >> 25) & 1);  // AMX-TILE, AMX-INT8
}

// Linux hands out the tiles' 8 KB of state only to a process that asks (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); oneDNN asks too, and asking again is harmless.
bool os_grants_tiles() {
  constexpr int kRequestPermission = 0x1023;
  constexpr int kTileData = 18;
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

#endif  // T5FORGE_HAS_AMX_CODE

}  // namespace

bool amx_int8_usable() {
#ifdef T5FORGE_HAS_AMX_CODE
  static const bool usable = cpu_has_amx_int8() && os_grants_tiles();
  return usable;
#else
  return false;
#endif
}

bool amx_int8_enabled() { return amx_int8_usable() && switched_on().load(); }

bool set_amx_int8_enabled(bool enabled) { return switched_on().exchange(enabled); }

void amx_int8_product(const int8_t* x, int64_t m, int64_t k, const int8_t* packed, int64_t n,
                      int32_t* out) {
#ifdef T5FORGE_HAS_AMX_CODE
  const int64_t k_padded = round_up(k, kBlock);
  thread_local std::vector<int8_t> padded;
  if (k_padded != k) {  // tiles read 64 k at a time; the packed weights are zero past k
    padded.assign(static_cast<size_t>(m * k_padded), 0);
    for (int64_t i = 0; i < m; ++i) std::memcpy(&padded[i * k_padded], x + i * k, k);
    x = padded.data();
  }
  const int64_t stripes = round_up(n, kBlock) / kBlock;
  const int64_t threads = std::max<int64_t>(
      1, std::min<int64_t>({omp_get_max_threads(), stripes,
                            stripes * k_padded * kBlock / kBytesPerThread}));
  auto run = m <= kTileRows ? few_rows : more_rows;
  if (threads == 1) {
    run(x, k_padded, m, packed, n, out, 0, stripes);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t share = (stripes + threads - 1) / threads;
    const int64_t first = omp_get_thread_num() * share;
    const int64_t last = std::min(stripes, first + share);
    if (first < last) run(x, k_padded, m, packed, n, out, first, last);
  }
#else
  (void)x, (void)m, (void)k, (void)packed, (void)n, (void)out;
  std::abort();  // callers check amx_int8_enabled() first
#endif
}

}  // namespace t5forge_kernels
