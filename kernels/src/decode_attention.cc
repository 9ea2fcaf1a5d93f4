// One decoding step's attention as an XLA FFI handler: each query reads only the cache
// positions it may see.
//
// softmax(q k^T + bias) v for the queries [G, H, R, D] of G inputs over their S cache rows
// key/value [G * S, H, L, D], the softmax over rows and positions together, with the bias
// [G or 1, S, H or 1, R or 1, L] (float32) holding the relative position bias and the masks
// (padding, causal, beam lineage) as T5's additive -1e10. XLA runs this step as batched dots
// with the softmax fused between them (YNNPACK), reading every position of every row's cache;
// here a masked position is neither read nor scored. That is exact: the weight XLA gives a
// position masked by -1e10 is exp(-1e10 - max), which is 0 in float32 whenever one position is
// visible (a query that sees nothing gets XLA's uniform softmax, computed in full). Logits,
// softmax and context accumulate in float32; the weights are rounded to the cache's type before
// the context, as XLA's reference does.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "decode_attention.h"
#include "shape_text.h"
#include "vector_support.h"

namespace t5forge_kernels {
namespace {

namespace ffi = xla::ffi;

// A bias at or below this masks its position: T5's masks add -1e10 (layers.MASK_BIAS), and no
// relative position bias comes near it.
constexpr float kMasked = -1e9f;
// Below this many multiply-adds (were every position visible) a call runs on its own thread:
// handing work to another costs more than it saves (greedy T5 1.1 small at batch 8, 2 cores).
constexpr int64_t kParallelWork = int64_t{1} << 20;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

#if defined(__GNUC__)
#define T5FORGE_INLINE inline __attribute__((always_inline))
#else
#define T5FORGE_INLINE inline
#endif

T5FORGE_INLINE float as_float(float value) { return value; }
T5FORGE_INLINE float as_float(uint16_t value) { return from_bf16(value); }
T5FORGE_INLINE void store(float value, float* out) { *out = value; }
T5FORGE_INLINE void store(float value, uint16_t* out) { *out = to_bf16(value); }
// A value as the element type holds it (the weights XLA multiplies the values by).
T5FORGE_INLINE float rounded(float value, const float*) { return value; }
T5FORGE_INLINE float rounded(float value, const uint16_t*) { return from_bf16(to_bf16(value)); }

// e^x for x <= 0 (a logit less the row's max), 0 below float32's normal range; within 3 ulp
// (checked over [-87.3, 0] against float64).
T5FORGE_INLINE float exp_nonpositive(float x) {
  const float clamped = x < -88.0f ? -88.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (clamped * 1.44269504088896341f + shifter) - shifter;
  const float r = (clamped - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent_bits, sizeof(scale));
  return x < -87.33654f ? 0.0f : p * scale;
}

// Sixteen float32 lanes as one value: GCC and Clang lower it to the widest vectors of each
// function clone (one AVX-512 register, two AVX2, four SSE).
typedef float f32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));

T5FORGE_INLINE f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
T5FORGE_INLINE f32x16 load16(const uint16_t* p) {
  u16x16 half;
  std::memcpy(&half, p, sizeof(half));
  return reinterpret_cast<f32x16>(__builtin_convertvector(half, u32x16) << 16);
}

// Lane i of the result is the sum of v[i]'s lanes: four rounds each halving what is left of
// every vector and packing two vectors' halves into one (15 shuffle pairs for 16 sums).
T5FORGE_INLINE f32x16 lane_sums(f32x16* v) {
  f32x16 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) {
    a[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                   19, 20, 21, 22, 23) +
           __builtin_shufflevector(v[2 * i], v[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                   26, 27, 28, 29, 30, 31);
  }
  for (int i = 0; i < 4; ++i) {
    b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                   19, 24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21,
                                   22, 23, 28, 29, 30, 31);
  }
  for (int i = 0; i < 2; ++i) {
    c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20,
                                   21, 24, 25, 28, 29) +
           __builtin_shufflevector(b[2 * i], b[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19,
                                   22, 23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                 28, 30) +
         __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                 29, 31);
}

// One logit to compute: query (float32) . key row, plus its bias, into `out`.
template <typename T>
struct Logit {
  const float* query;
  const T* key;
  float bias;
  float* out;
};

// Up to 16 logits at once, so that their horizontal sums share lane_sums' shuffles and their
// key rows are read in parallel.
template <typename T>
class LogitBatch {
 public:
  explicit LogitBatch(int64_t head_dim) : chunks_(head_dim / 16) {}

  T5FORGE_INLINE void add(const float* query, const T* key, float bias, float* out) {
    pending_[count_++] = {query, key, bias, out};
    if (count_ == 16) flush();
  }

  T5FORGE_INLINE void flush() {
    if (count_ == 0) return;
    for (int i = count_; i < 16; ++i) pending_[i] = pending_[0];  // computed, not stored
    f32x16 acc[16] = {};
    for (int64_t c = 0; c < chunks_; ++c) {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        acc[i] += load16(pending_[i].query + 16 * c) * load16(pending_[i].key + 16 * c);
      }
    }
    const f32x16 sums = lane_sums(acc);
    for (int i = 0; i < count_; ++i) *pending_[i].out = sums[i] + pending_[i].bias;
    count_ = 0;
  }

 private:
  int64_t chunks_;
  int count_ = 0;
  Logit<T> pending_[16];
};

struct Sizes {
  int64_t groups, slots, heads, queries, length, head_dim;
  int64_t bias_groups, bias_heads, bias_queries;  // each 1 (broadcast) or the full size

  T5FORGE_INLINE int64_t positions() const { return slots * length; }
  // Where bias[g, s, h, r, :] starts.
  T5FORGE_INLINE const float* bias_row(const float* bias, int64_t g, int64_t s, int64_t h, int64_t r) const {
    const int64_t gb = bias_groups == 1 ? 0 : g, hb = bias_heads == 1 ? 0 : h;
    const int64_t rb = bias_queries == 1 ? 0 : r;
    return bias + (((gb * slots + s) * bias_heads + hb) * bias_queries + rb) * length;
  }
  // Where key/value[g * S + s, h, l, :] starts.
  T5FORGE_INLINE int64_t cache_row(int64_t g, int64_t s, int64_t h, int64_t l) const {
    return (((g * slots + s) * heads + h) * length + l) * head_dim;
  }
};

// Columns [c, c + 16 * V) of one query's context: the weighted sum of the value rows at its
// visible positions (`weights[i]` times the row at offset `cache_rows[i]`).
template <int V, typename T>
T5FORGE_INLINE void context_columns(const T* value, const float* weights,
                                    const int64_t* cache_rows, int64_t count, int64_t c,
                                    T* out_row) {
  f32x16 acc[V] = {};
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* value_row = value + cache_rows[i] + c;
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) acc[j] += w * load16(value_row + 16 * j);
  }
  for (int j = 0; j < V; ++j) {
    for (int i = 0; i < 16; ++i) store(acc[j][i], out_row + c + 16 * j + i);
  }
}

// Attention of the (input, head) pairs [first, last) of G x H, one query at a time: the
// positions its bias leaves visible are listed (without branching: masks such as a beam's
// lineage are irregular), scored 16 at a time, softmaxed, and only they are read for the
// context.
template <typename T>
T5FORGE_WIDEST_VECTORS void attend_pairs(const Sizes& n, const T* query, const T* key,
                                         const T* value, const float* bias, T* out,
                                         int64_t first, int64_t last) {
  const int64_t positions = n.positions(), d = n.head_dim;
  thread_local std::vector<float> scratch;
  thread_local std::vector<int64_t> cache_rows;  // the listed positions' rows in key/value
  thread_local std::vector<float> biases;        // and their biases
  scratch.resize(static_cast<size_t>(d + positions));
  cache_rows.resize(static_cast<size_t>(positions));
  biases.resize(static_cast<size_t>(positions));
  float* query_row = scratch.data();  // [D] in float32
  float* weights = query_row + d;     // the listed positions' logits, then weights
  LogitBatch<T> logits(d);
  for (int64_t pair = first; pair < last; ++pair) {
    const int64_t g = pair / n.heads, h = pair % n.heads;
    for (int64_t r = 0; r < n.queries; ++r) {
      const T* query_in = query + (pair * n.queries + r) * d;
      for (int64_t i = 0; i < d; ++i) query_row[i] = as_float(query_in[i]);
      // The visible positions (or, with `every`, all of them), listed without a branch.
      auto list_positions = [&](bool every) {
        int64_t count = 0;
        for (int64_t s = 0; s < n.slots; ++s) {
          const float* row_bias = n.bias_row(bias, g, s, h, r);
          for (int64_t l = 0; l < n.length; ++l) {
            cache_rows[count] = n.cache_row(g, s, h, l);
            biases[count] = row_bias[l];
            count += every || row_bias[l] > kMasked;
          }
        }
        return count;
      };
      int64_t count = list_positions(false);
      if (count == 0) count = list_positions(true);  // nothing visible: XLA's uniform softmax
      for (int64_t i = 0; i < count; ++i) {
        logits.add(query_row, key + cache_rows[i], biases[i], weights + i);
      }
      logits.flush();
      float top = kNegativeInfinity;
#pragma omp simd reduction(max : top)
      for (int64_t i = 0; i < count; ++i) top = weights[i] > top ? weights[i] : top;
      float total = 0.0f;
#pragma omp simd reduction(+ : total)
      for (int64_t i = 0; i < count; ++i) {
        weights[i] = exp_nonpositive(weights[i] - top);
        total += weights[i];
      }
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) weights[i] = rounded(weights[i] / total, value);
      // The context, 64 columns at a time in registers.
      T* out_row = out + ((g * n.queries + r) * n.heads + h) * d;
      const int64_t* rows = cache_rows.data();
      int64_t c = 0;
      for (; c + 64 <= d; c += 64) {
        context_columns<4>(value, weights, rows, count, c, out_row);
      }
      switch ((d - c) / 16) {
        case 3: context_columns<3>(value, weights, rows, count, c, out_row); break;
        case 2: context_columns<2>(value, weights, rows, count, c, out_row); break;
        case 1: context_columns<1>(value, weights, rows, count, c, out_row); break;
      }
    }
  }
}

// The pairs shared with XLA's own threads: the calling thread and one task per other thread of
// XLA's pool take chunks of pairs from a counter until none are left, and the caller returns
// once every chunk taken is done. A task that starts late finds nothing left (the shared
// state outlives the call), so the caller never waits for a thread busy elsewhere.
template <typename T>
void attend_in_parallel(const Sizes& n, const T* query, const T* key, const T* value,
                        const float* bias, T* out, ffi::ThreadPool& pool) {
  const int64_t pairs = n.groups * n.heads;
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), pairs - 1);
  if (helpers <= 0 || pairs * n.queries * n.positions() * n.head_dim < kParallelWork) {
    attend_pairs(n, query, key, value, bias, out, 0, pairs);
    return;
  }
  struct Shared {
    std::atomic<int64_t> next{0}, done{0};
    int64_t chunk, chunks;
  };
  auto shared = std::make_shared<Shared>();
  shared->chunk = std::max<int64_t>(1, pairs / (4 * (helpers + 1)));
  shared->chunks = (pairs + shared->chunk - 1) / shared->chunk;
  const Sizes sizes = n;
  auto work = [shared, sizes, query, key, value, bias, out] {
    for (int64_t i; (i = shared->next.fetch_add(1)) < shared->chunks;) {
      const int64_t first = i * shared->chunk;
      attend_pairs(sizes, query, key, value, bias, out, first,
                   std::min(first + shared->chunk, sizes.groups * sizes.heads));
      shared->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule(decltype(work)(work));
  work();
  while (shared->done.load(std::memory_order_acquire) < shared->chunks) {
    std::this_thread::yield();
  }
}

ffi::Error DecodeAttentionImpl(ffi::AnyBuffer query, ffi::AnyBuffer key, ffi::AnyBuffer value,
                               ffi::Buffer<ffi::F32> bias, ffi::Result<ffi::AnyBuffer> out,
                               ffi::ThreadPool pool) {
  const auto q = query.dimensions(), k = key.dimensions(), b = bias.dimensions();
  const auto v = value.dimensions();
  if (q.size() != 4 || k.size() != 4 || b.size() != 5 ||
      !std::equal(k.begin(), k.end(), v.begin(), v.end())) {
    return ffi::Error::InvalidArgument(
        "decode_attention wants query [G, H, R, D], key = value [G*S, H, L, D] and bias "
        "[G|1, S, H|1, R|1, L]; got " + shape_text(q) + ", " + shape_text(k) + ", " +
        shape_text(v) + ", " + shape_text(b));
  }
  Sizes n{q[0], b[1], q[1], q[2], k[2], q[3], b[0], b[2], b[3]};
  const bool fits = k[0] == n.groups * n.slots && k[1] == n.heads && k[3] == n.head_dim &&
                    b[4] == n.length && (n.bias_groups == 1 || n.bias_groups == n.groups) &&
                    (n.bias_heads == 1 || n.bias_heads == n.heads) &&
                    (n.bias_queries == 1 || n.bias_queries == n.queries);
  if (!fits) {
    return ffi::Error::InvalidArgument("decode_attention: shapes do not fit: query " +
                                       shape_text(q) + ", key " + shape_text(k) + ", bias " +
                                       shape_text(b));
  }
  if (n.head_dim % 16 != 0) {
    return ffi::Error::InvalidArgument("decode_attention: head_dim must be a multiple of 16, got " +
                                       std::to_string(n.head_dim));
  }
  const auto type = query.element_type();
  if (key.element_type() != type || value.element_type() != type ||
      out->element_type() != type || (type != ffi::F32 && type != ffi::BF16)) {
    return ffi::Error::InvalidArgument(
        "decode_attention: query, key, value and output must all be float32 or all bfloat16");
  }
  const int64_t pairs = n.groups * n.heads;
  if (pairs == 0 || n.queries == 0 || n.head_dim == 0) return ffi::Error::Success();
  if (type == ffi::F32) {
    attend_in_parallel(n, static_cast<const float*>(query.untyped_data()),
                       static_cast<const float*>(key.untyped_data()),
                       static_cast<const float*>(value.untyped_data()), bias.typed_data(),
                       static_cast<float*>(out->untyped_data()), pool);
  } else {
    attend_in_parallel(n, static_cast<const uint16_t*>(query.untyped_data()),
                       static_cast<const uint16_t*>(key.untyped_data()),
                       static_cast<const uint16_t*>(value.untyped_data()), bias.typed_data(),
                       static_cast<uint16_t*>(out->untyped_data()), pool);
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DecodeAttention, DecodeAttentionImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ctx<ffi::ThreadPool>());

}  // namespace t5forge_kernels
