// The Python module: the FFI handlers as capsules for jax.ffi.register_ffi_target.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

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
    return targets;
  }, "Target name -> PyCapsule of its XLA FFI handler.");
  m.def("onednn_version", &t5forge_kernels::onednn_version,
        "The version of the oneDNN library loaded at run time.");
}
