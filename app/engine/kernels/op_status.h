// What the kernels of this library share: a kernel's Compute with its errors turned into ONNX
// Runtime's status, so that bad input fails the call with a message instead of ending the process,
// and the declaration parts every operator repeats (CpuOp).
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

// An operator of this library on the CPU provider: makes its Kernel from the node's attributes
// (an exception there becomes an ORT_INVALID_ARGUMENT status "name: what"). TOp names itself and
// its input and output types.
template <typename TOp, typename TKernel>
struct CpuOp : Ort::CustomOpBase<TOp, TKernel, true> {
  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new TKernel(api, info);
      return nullptr;
    } catch (const std::exception& e) {
      const char* name = static_cast<const TOp*>(this)->GetName();
      return api.CreateStatus(ORT_INVALID_ARGUMENT, (std::string(name) + ": " + e.what()).c_str());
    }
  }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
};

}  // namespace nmt_kernels
