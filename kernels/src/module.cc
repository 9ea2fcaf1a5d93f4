// The Python module: the FFI handlers as capsules for jax.ffi.register_ffi_target.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "amx_int8_product.h"
#include "decode_attention.h"
#include "onednn_products.h"

namespace nb = nanobind;

NB_MODULE(t5forge_kernels, m) {
  m.doc() = "oneDNN products for XLA:CPU, called through XLA's FFI (t5forge.models.native_products)";
  m.def("ffi_targets", [] {
    nb::dict targets;
    targets["t5forge_bf16_matmul"] =
        nb::capsule(reinterpret_cast<void*>(t5forge_kernels::Bf16Matmul));
    targets["t5forge_int8_matmul"] =
        nb::capsule(reinterpret_cast<void*>(t5forge_kernels::Int8Matmul));
    targets["t5forge_packed_int8_matmul"] =
        nb::capsule(reinterpret_cast<void*>(t5forge_kernels::PackedInt8Matmul));
    targets["t5forge_packed_int8_dense"] =
        nb::capsule(reinterpret_cast<void*>(t5forge_kernels::PackedInt8Dense));
    targets["t5forge_decode_attention"] =
        nb::capsule(reinterpret_cast<void*>(t5forge_kernels::DecodeAttention));
    return targets;
  }, "Target name -> PyCapsule of its XLA FFI handler.");
  m.def(
      "pack_int8_weights",
      [](nb::ndarray<const int8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> weights) {
        int64_t k = static_cast<int64_t>(weights.shape(0));
        int64_t n = static_cast<int64_t>(weights.shape(1));
        size_t size = t5forge_kernels::packed_int8_size(k, n);
        auto* packed = new uint8_t[size];
        nb::capsule owner(packed, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
        {
          nb::gil_scoped_release unlocked;
          t5forge_kernels::pack_int8_weights(weights.data(), k, n, packed);
        }
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(packed, {size}, owner);
      },
      nb::arg("weights"),
      "int8 [K, N] weights (C-contiguous numpy) in oneDNN's blocked layout for this CPU, uint8.");
  m.def("amx_int8_enabled", &t5forge_kernels::amx_int8_enabled,
        "Whether packed int8 products of few rows run on the AMX kernel (the CPU has AMX, and it "
        "is not switched off).");
  m.def("set_amx_int8_enabled", &t5forge_kernels::set_amx_int8_enabled, nb::arg("enabled"),
        "Switches the AMX kernel on or off; returns the previous setting.");
  m.def("decode_attention_lanes", &t5forge_kernels::decode_attention_lanes,
        "The vector lanes of the decode attention's build in use: 16 (AVX-512), 8 (AVX2 and "
        "FMA) or 4 (baseline), the widest this CPU runs unless set.");
  m.def("set_decode_attention_lanes", &t5forge_kernels::set_decode_attention_lanes,
        nb::arg("lanes"),
        "Runs the decode attention's build of `lanes` (4, 8, or 16 where the CPU has them); "
        "returns the previous. ValueError for a width this CPU lacks.");
  m.def("onednn_version", &t5forge_kernels::onednn_version,
        "The version of the oneDNN library loaded at run time.");
}
