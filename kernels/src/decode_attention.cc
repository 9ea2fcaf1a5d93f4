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
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
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

// W float32 lanes as one value, W the lanes of one register of the function compiled (the
// T5FORGE_ATTEND_PAIRS functions): 16 under AVX-512, 8 under AVX2, 4 on the baseline. A vector
// wider than the target's registers is lowered through memory (GCC copies it with `rep movs`),
// so each target gets its own width rather than one 16-lane form for all.
template <int W>
struct Vectors {
  typedef float f32 __attribute__((vector_size(4 * W)));
  typedef int32_t i32 __attribute__((vector_size(4 * W)));
  typedef uint32_t u32 __attribute__((vector_size(4 * W)));
  typedef uint16_t u16 __attribute__((vector_size(2 * W)));
};

template <int W>
using f32v = typename Vectors<W>::f32;

template <int W>
T5FORGE_INLINE f32v<W> load(const float* p) {
  f32v<W> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <int W>
T5FORGE_INLINE f32v<W> load(const uint16_t* p) {
  typename Vectors<W>::u16 half;
  std::memcpy(&half, p, sizeof(half));
  return reinterpret_cast<f32v<W>>(__builtin_convertvector(half, typename Vectors<W>::u32)
                                   << 16);
}

template <int W>
T5FORGE_INLINE void store(f32v<W> v, float* p) {
  std::memcpy(p, &v, sizeof(v));
}

// Values as the element type holds them (the weights XLA multiplies the values by): float32
// as they are, bfloat16 rounded to nearest even (NaN kept quiet), as to_bf16 rounds.
template <int W>
T5FORGE_INLINE f32v<W> rounded(f32v<W> v, const float*) {
  return v;
}
template <int W>
T5FORGE_INLINE f32v<W> rounded(f32v<W> v, const uint16_t*) {
  using U = typename Vectors<W>::u32;
  const U bits = reinterpret_cast<U>(v);
  const U nearest = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  const U quiet_nan = (bits | 0x00400000u) & 0xffff0000u;
  return reinterpret_cast<f32v<W>>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
}

// e^x for x <= 0 (a logit less the row's max), 0 below float32's normal range (and for
// -inf); within 3 ulp (checked over [-87.3, 0] against float64).
template <int W>
T5FORGE_INLINE f32v<W> exp_nonpositive(f32v<W> x) {
  using V = f32v<W>;
  const V zero = {}, lowest = zero - 88.0f;
  const V clamped = x < lowest ? lowest : x;
  const V shifter = zero + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V n = (clamped * 1.44269504088896341f + shifter) - shifter;
  const V r = (clamped - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  V p = zero + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  using I = typename Vectors<W>::i32;
  const V scale = reinterpret_cast<V>((__builtin_convertvector(n, I) + 127) << 23);
  return x < zero - 87.33654f ? zero : p * scale;
}

// softmax of logits[0, count) in place, W at a time, then rounded as the values' type T: the
// list is padded with -inf up to a multiple of W (weight 0; `logits` has room for it).
template <int W, typename T>
T5FORGE_INLINE void softmax_in_place(float* logits, int64_t count, const T* values) {
  using V = f32v<W>;
  const int64_t padded = (count + W - 1) / W * W;
  for (int64_t i = count; i < padded; ++i) logits[i] = kNegativeInfinity;
  V tops = V{} + kNegativeInfinity;
  for (int64_t i = 0; i < padded; i += W) {
    const V x = load<W>(logits + i);
    tops = x > tops ? x : tops;
  }
  float top = kNegativeInfinity;
  for (int i = 0; i < W; ++i) top = tops[i] > top ? tops[i] : top;
  V totals = {};
  for (int64_t i = 0; i < padded; i += W) {
    const V weight = exp_nonpositive<W>(load<W>(logits + i) - top);
    store<W>(weight, logits + i);
    totals += weight;
  }
  float total = 0.0f;
  for (int i = 0; i < W; ++i) total += totals[i];
  for (int64_t i = 0; i < padded; i += W) {
    store<W>(rounded<W>(load<W>(logits + i) / total, values), logits + i);
  }
}

// x's and y's lanes summed in pairs H apart within blocks of 2H, the results packed as
// [x's block 0, y's block 0, x's block 1, ...]: one round of lane_sums.
template <int W, int H, size_t... I>
T5FORGE_INLINE f32v<W> halves_added(f32v<W> x, f32v<W> y, std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, ((I / H) * 2 * H + I % H)...) +
         __builtin_shufflevector(x, y, ((I / H) * 2 * H + H + I % H)...);
}

// Replaces v[0, n) by n / 2 vectors each holding two of their partial sums per block, until
// one vector is left: lane i of v[0] is then the sum of the original v[i]'s lanes (log2 W
// rounds, W - 1 shuffle pairs for W sums).
template <int W, int N>
T5FORGE_INLINE void lane_sums(f32v<W>* v) {
  if constexpr (N > 1) {
    for (int i = 0; i < N / 2; ++i) {
      v[i] = halves_added<W, N / 2>(v[2 * i], v[2 * i + 1], std::make_index_sequence<W>());
    }
    lane_sums<W, N / 2>(v);
  }
}

// One logit to compute: the query . key row, plus its bias, into `out`.
template <typename T>
struct Logit {
  const T* key;
  float bias;
  float* out;
};

// Up to W logits of one query at once, so that their horizontal sums share lane_sums'
// shuffles, their key rows are read in parallel and each chunk of the query is loaded once
// for all of them (W accumulators: half the registers of the target).
template <int W, typename T>
class LogitBatch {
 public:
  LogitBatch(const float* query, int64_t head_dim) : query_(query), chunks_(head_dim / W) {}

  T5FORGE_INLINE void add(const T* key, float bias, float* out) {
    pending_[count_++] = {key, bias, out};
    if (count_ == W) flush();
  }

  T5FORGE_INLINE void flush() {
    if (count_ == 0) return;
    for (int i = count_; i < W; ++i) pending_[i] = pending_[0];  // computed, not stored
    f32v<W> acc[W] = {};
    for (int64_t c = 0; c < chunks_; ++c) {
      const f32v<W> query = load<W>(query_ + W * c);
#pragma GCC unroll 16
      for (int i = 0; i < W; ++i) acc[i] += query * load<W>(pending_[i].key + W * c);
    }
    lane_sums<W, W>(acc);
    for (int i = 0; i < count_; ++i) *pending_[i].out = acc[0][i] + pending_[i].bias;
    count_ = 0;
  }

 private:
  const float* query_;
  int64_t chunks_;
  int count_ = 0;
  Logit<T> pending_[W];
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

// Columns [c, c + W * V) of one query's context: the weighted sum of the value rows at its
// visible positions (`weights[i]` times the row at offset `cache_rows[i]`).
template <int W, int V, typename T>
T5FORGE_INLINE void context_columns(const T* value, const float* weights,
                                    const int64_t* cache_rows, int64_t count, int64_t c,
                                    T* out_row) {
  f32v<W> acc[V] = {};
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* value_row = value + cache_rows[i] + c;
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) acc[j] += w * load<W>(value_row + W * j);
  }
  for (int j = 0; j < V; ++j) {
    for (int i = 0; i < W; ++i) store(acc[j][i], out_row + c + W * j + i);
  }
}

// Attention of the (input, head) pairs [first, last) of G x H, one query at a time: the
// positions its bias leaves visible are listed (without branching: masks such as a beam's
// lineage are irregular), scored W at a time, softmaxed, and only they are read for the
// context. Inlined into each target's function (T5FORGE_ATTEND_PAIRS).
template <int W, typename T>
T5FORGE_INLINE void attend_pairs_in(const Sizes& n, const T* query, const T* key,
                                         const T* value, const float* bias, T* out,
                                         int64_t first, int64_t last) {
  const int64_t positions = n.positions(), d = n.head_dim;
  thread_local std::vector<float> scratch;
  thread_local std::vector<int64_t> cache_rows;  // the listed positions' rows in key/value
  thread_local std::vector<float> biases;        // and their biases
  scratch.resize(static_cast<size_t>(d + positions + W));  // W: softmax's padding
  cache_rows.resize(static_cast<size_t>(positions));
  biases.resize(static_cast<size_t>(positions));
  float* query_row = scratch.data();  // [D] in float32
  float* weights = query_row + d;     // the listed positions' logits, then weights
  LogitBatch<W, T> logits(query_row, d);
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
        logits.add(key + cache_rows[i], biases[i], weights + i);
      }
      logits.flush();
      softmax_in_place<W>(weights, count, value);
      // The context, 4 W columns at a time in registers.
      T* out_row = out + ((g * n.queries + r) * n.heads + h) * d;
      const int64_t* rows = cache_rows.data();
      int64_t c = 0;
      for (; c + 4 * W <= d; c += 4 * W) {
        context_columns<W, 4>(value, weights, rows, count, c, out_row);
      }
      switch ((d - c) / W) {
        case 3: context_columns<W, 3>(value, weights, rows, count, c, out_row); break;
        case 2: context_columns<W, 2>(value, weights, rows, count, c, out_row); break;
        case 1: context_columns<W, 1>(value, weights, rows, count, c, out_row); break;
      }
    }
  }
}

#define T5FORGE_ATTEND_PAIRS(name, target, lanes)                                          \
  template <typename T>                                                                    \
  target void name(const Sizes& n, const T* query, const T* key, const T* value,           \
                   const float* bias, T* out, int64_t first, int64_t last) {              \
    attend_pairs_in<lanes>(n, query, key, value, bias, out, first, last);                  \
  }

#if defined(__x86_64__) && defined(__GNUC__)
T5FORGE_ATTEND_PAIRS(attend_pairs_avx512, __attribute__((target("avx512f"))), 16)
T5FORGE_ATTEND_PAIRS(attend_pairs_avx2, __attribute__((target("avx2,fma"))), 8)
#endif
T5FORGE_ATTEND_PAIRS(attend_pairs_baseline, , 4)

// The widest build this CPU runs: 16 lanes with AVX-512, 8 with AVX2 and FMA, else 4.
int widest_lanes() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#endif
  return 4;
}

std::atomic<int>& lanes_in_use() {
  static std::atomic<int> lanes{widest_lanes()};
  return lanes;
}

template <typename T>
void attend_pairs(const Sizes& n, const T* query, const T* key, const T* value,
                  const float* bias, T* out, int64_t first, int64_t last) {
  switch (lanes_in_use().load(std::memory_order_relaxed)) {
#if defined(__x86_64__) && defined(__GNUC__)
    case 16: return attend_pairs_avx512(n, query, key, value, bias, out, first, last);
    case 8: return attend_pairs_avx2(n, query, key, value, bias, out, first, last);
#endif
    default: return attend_pairs_baseline(n, query, key, value, bias, out, first, last);
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

int decode_attention_lanes() { return lanes_in_use().load(); }

int set_decode_attention_lanes(int lanes) {
  if (lanes != 4 && lanes != 8 && lanes != 16) {
    throw std::invalid_argument("decode attention lanes are 4, 8 or 16, not " +
                                std::to_string(lanes));
  }
  if (lanes > widest_lanes()) {
    throw std::invalid_argument("this CPU runs the decode attention's builds up to " +
                                std::to_string(widest_lanes()) + " lanes, not " +
                                std::to_string(lanes));
  }
  return lanes_in_use().exchange(lanes);
}

}  // namespace t5forge_kernels
