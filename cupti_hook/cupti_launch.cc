// File: cupti_hook/cupti_launch.cc
#include "cupti_hook/cupti_launch.h"

#include <cuda.h>

namespace cuprobe {
namespace {

template <typename P>
void FromClassicParams(const P* p, LaunchShape* s) {
  s->handle = p->f;
  s->grid[0] = p->gridDimX;
  s->grid[1] = p->gridDimY;
  s->grid[2] = p->gridDimZ;
  s->block[0] = p->blockDimX;
  s->block[1] = p->blockDimY;
  s->block[2] = p->blockDimZ;
  s->shared = p->sharedMemBytes;
  s->stream = reinterpret_cast<uint64_t>(p->hStream);
}

template <typename P>
void FromExParams(const P* p, LaunchShape* s) {
  s->handle = p->f;
  const CUlaunchConfig* c = p->config;
  if (c == nullptr) return;
  s->grid[0] = c->gridDimX;
  s->grid[1] = c->gridDimY;
  s->grid[2] = c->gridDimZ;
  s->block[0] = c->blockDimX;
  s->block[1] = c->blockDimY;
  s->block[2] = c->blockDimZ;
  s->shared = c->sharedMemBytes;
  s->stream = reinterpret_cast<uint64_t>(c->hStream);
}

}  // namespace

bool LaunchApiOf(CUpti_CallbackId cbid, LaunchApi* api) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      *api = LaunchApi::kLaunchKernel;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      *api = LaunchApi::kLaunchKernelEx;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      *api = LaunchApi::kLaunchCooperativeKernel;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      *api = LaunchApi::kGraphLaunch;
      return true;
    default:
      return false;
  }
}

bool RuntimeLaunchApiOf(CUpti_CallbackId cbid, LaunchApi* api) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
      *api = LaunchApi::kCudaLaunchKernel;
      return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
      *api = LaunchApi::kCudaLaunchKernelEx;
      return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
      *api = LaunchApi::kCudaLaunchCooperativeKernel;
      return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
      *api = LaunchApi::kCudaGraphLaunch;
      return true;
    default:
      return false;
  }
}

bool ReadShape(CUpti_CallbackId cbid, const void* params, LaunchShape* s) {
  if (params == nullptr || !LaunchApiOf(cbid, &s->api)) return false;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      FromClassicParams(static_cast<const cuLaunchKernel_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      FromClassicParams(static_cast<const cuLaunchKernel_ptsz_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      FromExParams(static_cast<const cuLaunchKernelEx_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      FromExParams(static_cast<const cuLaunchKernelEx_ptsz_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      FromClassicParams(static_cast<const cuLaunchCooperativeKernel_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      FromClassicParams(static_cast<const cuLaunchCooperativeKernel_ptsz_params*>(params), s);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch: {
      auto* p = static_cast<const cuGraphLaunch_params*>(params);
      s->stream = reinterpret_cast<uint64_t>(p->hStream);
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      auto* p = static_cast<const cuGraphLaunch_ptsz_params*>(params);
      s->stream = reinterpret_cast<uint64_t>(p->hStream);
      return true;
    }
    default:
      return false;
  }
}

void* const* KernelParams(CUpti_CallbackId cbid, const void* params) {
  if (params == nullptr) return nullptr;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      return static_cast<const cuLaunchKernel_params*>(params)->kernelParams;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      return static_cast<const cuLaunchKernel_ptsz_params*>(params)->kernelParams;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      return static_cast<const cuLaunchKernelEx_params*>(params)->kernelParams;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return static_cast<const cuLaunchKernelEx_ptsz_params*>(params)->kernelParams;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      return static_cast<const cuLaunchCooperativeKernel_params*>(params)->kernelParams;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return static_cast<const cuLaunchCooperativeKernel_ptsz_params*>(params)->kernelParams;
    default:
      return nullptr;
  }
}

}  // namespace cuprobe
