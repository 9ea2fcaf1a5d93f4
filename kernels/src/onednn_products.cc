// XLA FFI handlers for the products XLA:CPU runs slowly or not at all, on oneDNN's matmul:
// bf16 x bf16 with float32 accumulation (either operand stored transposed, so the weight
// gradient aT @ g needs no transposed copy) and int8 x int8 -> int32 with per-row and
// per-column scales (VNNI; oneDNN compensates signed int8 sources itself), its weights either
// plain [K, N] or packed once into oneDNN's blocked layout (pack_int8_weights); packed products
// of few rows run on amx_int8_product where the CPU has AMX.
#include "onednn_products.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "amx_int8_product.h"
#include "dnnl.hpp"
#include "primitive_cache.h"
#include "shape_text.h"
#include "vector_support.h"

namespace t5forge_kernels {
namespace {

namespace ffi = xla::ffi;
using dnnl::memory;

enum ProductKind { kBf16 = 0, kInt8 = 1, kInt8Packed = 2 };

// A compiled primitive with the scratchpad size it asks for (the scratchpad is the caller's,
// so one primitive runs on several XLA threads at once).
struct CompiledProduct {
  dnnl::matmul primitive;
  memory::desc a, b, out, scratchpad;
  bool b_in_amx_layout = false;  // amx_int8_product can read b
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

PrimitiveCache<CompiledProduct>& cache() {
  static PrimitiveCache<CompiledProduct> primitives(256);
  return primitives;
}

// Logical [rows, cols] of a row-major buffer, or of the transpose of one.
memory::desc matrix(int64_t rows, int64_t cols, memory::data_type type, bool transposed) {
  memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
  return memory::desc({rows, cols}, type, strides);
}

// The layout oneDNN's int8 matmul wants its [k, n] weights in on this CPU: the same for every
// M (checked over M = 1..8192 for T5's shapes), so weights are packed once for all of them.
memory::desc packed_int8_weights(int64_t k, int64_t n) {
  memory::desc any({k, n}, memory::data_type::s8, memory::format_tag::any);
  dnnl::matmul::primitive_desc pd(cpu_engine(), matrix(1, k, memory::data_type::s8, false), any,
                                  memory::desc({1, n}, memory::data_type::s32, memory::dims{n, 1}));
  return pd.weights_desc();
}

// Whether int8 [k, n] weights laid out as `weights` are in oneDNN's AMX layout, BA16a64b4a with
// nothing appended: the layout amx_int8_product reads.
bool in_amx_layout(const memory::desc& weights, int64_t k, int64_t n) {
  if (weights.get_format_kind() != memory::format_kind::blocked) return false;
  const int64_t k_padded = (k + 63) / 64 * 64, n_padded = (n + 63) / 64 * 64;
  return weights.get_inner_blks() == memory::dims{16, 64, 4} &&
         weights.get_inner_idxs() == memory::dims{0, 1, 0} &&
         weights.get_padded_dims() == memory::dims{k_padded, n_padded} &&
         weights.get_strides() == memory::dims{64 * 64, k_padded * 64} &&
         weights.get_size() == static_cast<size_t>(k_padded * n_padded);
}

// `b` is the weights' layout: row-major (or transposed) unless the key is kInt8Packed.
std::shared_ptr<const CompiledProduct> compiled(const ProductKey& key, memory::data_type in_type,
                                                memory::data_type out_type) {
  return cache().get(key, [&] {
    memory::desc a = matrix(key.m, key.k, in_type, key.a_transposed);
    memory::desc b = key.kind == kInt8Packed ? packed_int8_weights(key.k, key.n)
                                             : matrix(key.k, key.n, in_type, key.b_transposed);
    memory::desc out({key.m, key.n}, out_type, memory::dims{key.n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(cpu_engine(), a, b, out, attr);
    bool amx = key.kind == kInt8Packed && in_amx_layout(b, key.k, key.n);
    return CompiledProduct{dnnl::matmul(pd), a, b, out, pd.scratchpad_desc(), amx};
  });
}

void run(const CompiledProduct& product, void* a, void* b, void* out) {
  thread_local std::vector<char> scratch;
  thread_local dnnl::stream stream(cpu_engine());
  if (scratch.size() < product.scratchpad.get_size()) scratch.resize(product.scratchpad.get_size());
  dnnl::engine& engine = cpu_engine();
  product.primitive.execute(stream, {{DNNL_ARG_SRC, memory(product.a, engine, a)},
                                     {DNNL_ARG_WEIGHTS, memory(product.b, engine, b)},
                                     {DNNL_ARG_DST, memory(product.out, engine, out)},
                                     {DNNL_ARG_SCRATCHPAD,
                                      memory(product.scratchpad, engine, scratch.data())}});
  stream.wait();
}

// Sizes of a 2-D operand whose contracting axis is `contract`: {free, contracting}.
std::pair<int64_t, int64_t> free_and_contracting(ffi::Span<const int64_t> dims, int64_t contract) {
  return contract == 1 ? std::make_pair(dims[0], dims[1]) : std::make_pair(dims[1], dims[0]);
}

ffi::Error check_matrix(const char* name, ffi::Span<const int64_t> dims) {
  if (dims.size() != 2) {
    return ffi::Error::InvalidArgument(std::string(name) + " must be 2-D, got shape " +
                                       shape_text(dims));
  }
  return ffi::Error::Success();
}

ffi::Error Bf16MatmulImpl(ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b,
                          ffi::Result<ffi::AnyBuffer> out, int64_t contract_a,
                          int64_t contract_b) {
  if (auto error = check_matrix("a", a.dimensions()); error.failure()) return error;
  if (auto error = check_matrix("b", b.dimensions()); error.failure()) return error;
  if ((contract_a != 0 && contract_a != 1) || (contract_b != 0 && contract_b != 1)) {
    return ffi::Error::InvalidArgument("contract_a and contract_b must each be 0 or 1");
  }
  auto [m, k] = free_and_contracting(a.dimensions(), contract_a);
  auto [n, k_b] = free_and_contracting(b.dimensions(), contract_b);
  if (k != k_b) {
    return ffi::Error::InvalidArgument("contracting sizes differ: a " +
                                       shape_text(a.dimensions()) + " and b " +
                                       shape_text(b.dimensions()));
  }
  memory::data_type out_type;
  if (out->element_type() == ffi::F32) {
    out_type = memory::data_type::f32;
  } else if (out->element_type() == ffi::BF16) {
    out_type = memory::data_type::bf16;
  } else {
    return ffi::Error::InvalidArgument("bf16_matmul's output must be float32 or bfloat16");
  }
  ProductKey key{kBf16, m, k, n, contract_a == 0, contract_b == 1, static_cast<int>(out_type)};
  run(*compiled(key, memory::data_type::bf16, out_type), a.untyped_data(), b.untyped_data(),
      out->untyped_data());
  return ffi::Error::Success();
}

// out[i, j] = float(acc[i, j]) * x_scale[i] * w_scale[j], in that order (as XLA's reference),
// one row at a time in vector registers (the widest the CPU has): the pass reads and writes
// every output once, so a scalar loop cost more than the product on wide, short-K shapes
// (T5's logits). `out` may be `acc` itself (the same element read, then written).
template <typename Out>
T5FORGE_WIDEST_VECTORS void scale_rows(
    const int32_t* acc, const float* x_scale, const float* w_scale, int64_t m, int64_t n,
    Out* out) {
  for (int64_t i = 0; i < m; ++i) {
    const int32_t* row = acc + i * n;
    Out* row_out = out + i * n;
    const float row_scale = x_scale[i];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float value = static_cast<float>(row[j]) * row_scale * w_scale[j];
      if constexpr (std::is_same_v<Out, float>) {
        row_out[j] = value;
      } else {
        row_out[j] = to_bf16(value);
      }
    }
  }
}

// int8 x [m, k] @ weights (`weights_bytes` long) -> int32, then scaled into `out` (float32 or
// bfloat16).
ffi::Error scaled_int8_product(ProductKind kind, const int8_t* x, int64_t m, int64_t k,
                               void* weights, size_t weights_bytes, int64_t n, const float* xs,
                               const float* ws, ffi::Result<ffi::AnyBuffer>& out) {
  ProductKey key{kind, m, k, n, false, false, static_cast<int>(memory::data_type::s32)};
  auto product = compiled(key, memory::data_type::s8, memory::data_type::s32);
  if (weights_bytes != product->b.get_size()) {
    return ffi::Error::InvalidArgument(
        "packed weights do not fit x [" + std::to_string(m) + "," + std::to_string(k) +
        "] and " + std::to_string(n) + " outputs: pack them with pack_int8_weights on this "
        "machine");
  }
  // The int32 sums, into `acc`.
  auto sum = [&](int32_t* acc) {
    if (product->b_in_amx_layout && m <= kAmxMaxRows && amx_int8_enabled()) {
      amx_int8_product(x, m, k, static_cast<const int8_t*>(weights), n, acc);
    } else {
      run(*product, const_cast<int8_t*>(x), weights, acc);
    }
  };
  if (out->element_type() == ffi::F32) {
    // The int32 sums fit the float32 output's own bytes, scaled in place.
    auto* result = static_cast<float*>(out->untyped_data());
    auto* acc = reinterpret_cast<int32_t*>(result);
    sum(acc);
    scale_rows(acc, xs, ws, m, n, result);
  } else if (out->element_type() == ffi::BF16) {
    thread_local std::vector<int32_t> acc;
    acc.resize(static_cast<size_t>(m * n));
    sum(acc.data());
    auto* result = static_cast<uint16_t*>(out->untyped_data());
    scale_rows(acc.data(), xs, ws, m, n, result);
  } else {
    return ffi::Error::InvalidArgument("int8_matmul's output must be float32 or bfloat16");
  }
  return ffi::Error::Success();
}

ffi::Error check_scales(ffi::Buffer<ffi::S8>& x, ffi::Buffer<ffi::F32>& x_scale,
                        ffi::Buffer<ffi::F32>& w_scale, int64_t n) {
  if (auto error = check_matrix("x_q", x.dimensions()); error.failure()) return error;
  if (x_scale.element_count() != static_cast<size_t>(x.dimensions()[0]) ||
      w_scale.element_count() != static_cast<size_t>(n)) {
    return ffi::Error::InvalidArgument("x_scale must have M elements and w_scale N elements");
  }
  return ffi::Error::Success();
}

ffi::Error Int8MatmulImpl(ffi::Buffer<ffi::S8> x, ffi::Buffer<ffi::F32> x_scale,
                          ffi::Buffer<ffi::S8> w, ffi::Buffer<ffi::F32> w_scale,
                          ffi::Result<ffi::AnyBuffer> out) {
  if (auto error = check_matrix("w_q", w.dimensions()); error.failure()) return error;
  if (auto error = check_scales(x, x_scale, w_scale, w.dimensions()[1]); error.failure()) {
    return error;
  }
  if (w.dimensions()[0] != x.dimensions()[1]) {
    return ffi::Error::InvalidArgument("x_q " + shape_text(x.dimensions()) + " and w_q " +
                                       shape_text(w.dimensions()) + " do not contract");
  }
  return scaled_int8_product(kInt8, x.typed_data(), x.dimensions()[0], x.dimensions()[1],
                             w.untyped_data(), w.element_count(), w.dimensions()[1],
                             x_scale.typed_data(), w_scale.typed_data(), out);
}

ffi::Error PackedInt8MatmulImpl(ffi::Buffer<ffi::S8> x, ffi::Buffer<ffi::F32> x_scale,
                                ffi::Buffer<ffi::U8> packed, ffi::Buffer<ffi::F32> w_scale,
                                ffi::Result<ffi::AnyBuffer> out) {
  int64_t n = static_cast<int64_t>(w_scale.element_count());
  if (auto error = check_scales(x, x_scale, w_scale, n); error.failure()) return error;
  return scaled_int8_product(kInt8Packed, x.typed_data(), x.dimensions()[0], x.dimensions()[1],
                             packed.untyped_data(), packed.element_count(), n,
                             x_scale.typed_data(), w_scale.typed_data(), out);
}

inline float as_float(float value) { return value; }
inline float as_float(uint16_t bf16) { return from_bf16(bf16); }

// Each row of x [m, k] quantised on its own, as t5forge.models.quantized.quantize_rows does it:
// scale = largest |x| * float32(1/127) (1 for a row of zeros), values = round-half-even(x *
// (1 / scale)) within +-127, the same float32 operations, so values and scales are XLA's bit
// for bit.
template <typename In>
T5FORGE_WIDEST_VECTORS void quantize_rows(const In* x, int64_t m, int64_t k, int8_t* values,
                                          float* scales) {
  for (int64_t i = 0; i < m; ++i) {
    const In* row = x + i * k;
    float largest = 0.0f;
#pragma omp simd reduction(max : largest)
    for (int64_t j = 0; j < k; ++j) largest = std::max(largest, std::fabs(as_float(row[j])));
    float scale = largest * (1.0f / 127.0f);
    if (scale == 0.0f) scale = 1.0f;
    scales[i] = scale;
    const float inverse = 1.0f / scale;
    int8_t* row_values = values + i * k;
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) {
      const float q = std::nearbyint(as_float(row[j]) * inverse);
      row_values[j] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q)));
    }
  }
}

// A Dense layer's int8 product from its float input: x (float32 or bfloat16 [M, K]) quantised
// per row here, then the packed product, so a decoding step runs one call per product instead
// of XLA's reduction, quantising fusion and the call (a hundred small ops a T5 1.1 small step).
ffi::Error PackedInt8DenseImpl(ffi::AnyBuffer x, ffi::Buffer<ffi::U8> packed,
                               ffi::Buffer<ffi::F32> w_scale, ffi::Result<ffi::AnyBuffer> out) {
  if (auto error = check_matrix("x", x.dimensions()); error.failure()) return error;
  const int64_t m = x.dimensions()[0], k = x.dimensions()[1];
  thread_local std::vector<int8_t> values;
  thread_local std::vector<float> scales;
  values.resize(static_cast<size_t>(m * k));
  scales.resize(static_cast<size_t>(m));
  if (x.element_type() == ffi::F32) {
    quantize_rows(static_cast<const float*>(x.untyped_data()), m, k, values.data(),
                  scales.data());
  } else if (x.element_type() == ffi::BF16) {
    quantize_rows(static_cast<const uint16_t*>(x.untyped_data()), m, k, values.data(),
                  scales.data());
  } else {
    return ffi::Error::InvalidArgument("packed_int8_dense's input must be float32 or bfloat16");
  }
  return scaled_int8_product(kInt8Packed, values.data(), m, k, packed.untyped_data(),
                             packed.element_count(), static_cast<int64_t>(w_scale.element_count()),
                             scales.data(), w_scale.typed_data(), out);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Bf16Matmul, Bf16MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("contract_a")
                                  .Attr<int64_t>("contract_b"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Int8Matmul, Int8MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(PackedInt8Matmul, PackedInt8MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(PackedInt8Dense, PackedInt8DenseImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::AnyBuffer>());

size_t packed_int8_size(int64_t k, int64_t n) { return packed_int8_weights(k, n).get_size(); }

void pack_int8_weights(const int8_t* weights, int64_t k, int64_t n, uint8_t* packed) {
  dnnl::engine& engine = cpu_engine();
  memory plain(matrix(k, n, memory::data_type::s8, false), engine,
               const_cast<int8_t*>(weights));
  memory blocked(packed_int8_weights(k, n), engine, packed);
  dnnl::stream stream(engine);
  dnnl::reorder(plain, blocked).execute(stream, plain, blocked);
  stream.wait();
}

std::string onednn_version() {
  const dnnl_version_t* version = dnnl_version();
  return std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
         std::to_string(version->patch);
}

}  // namespace t5forge_kernels
