// What the kernels of this library share: a kernel's Compute with its errors turned into ONNX
// Runtime's status, so that bad input fails the call with a message instead of ending the process.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <exception>
#include <string>

namespace nmt_kernels {

// kernel.Compute(context); an exception becomes an ORT_INVALID_ARGUMENT status "op: what".
template <typename Kernel>
OrtStatusPtr guarded_compute(const char* op, Kernel& kernel, OrtKernelContext* context) {
  try {
    kernel.Compute(context);
    return nullptr;
  } catch (const std::exception& e) {
    return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, (std::string(op) + ": " + e.what()).c_str());
  }
}

}  // namespace nmt_kernels
