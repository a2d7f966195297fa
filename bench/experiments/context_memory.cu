// bench/experiments/context_memory.cu: which allocations made in one CUDA
// context can a kernel in another context of the same device use, and which
// survive the destruction of the context that made them? The measurement
// behind the maps' memory kind (docs/MAPS.md, "Several contexts"). Not part
// of the build; on a GPU machine:
//
//   nvcc -arch=sm_90 -cubin -o poke.cubin context_memory.cu
//   nvcc -arch=sm_90 -o context_memory context_memory.cu -lcuda
//   ./context_memory          # reads poke.cubin from the current folder
//
// A fault (an illegal address) ends CUDA for the whole process, so the
// first fault stops the cases after it from running.
#include <cuda.h>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>

extern "C" __global__ void poke(unsigned long long* p) { atomicAdd(p, 1ull); }

static const char* Err(CUresult r) { const char* s = "?"; cuGetErrorString(r, &s); return s; }
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("  %s -> %s\n", #x, Err(r_)); return 1; } } while (0)
static char image[1 << 20];

struct Allocs { CUdeviceptr plain = 0, vmm = 0, managed = 0, hostdev = 0; void* host = nullptr;
  CUmemGenericAllocationHandle h = 0; size_t gran = 0; };

static int Make(CUdevice dev, Allocs* a) {
  CK(cuMemAlloc(&a->plain, 4096)); CK(cuMemsetD8(a->plain, 0, 4096));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = dev;
  CK(cuMemGetAllocationGranularity(&a->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CK(cuMemCreate(&a->h, a->gran, &prop, 0));
  CK(cuMemAddressReserve(&a->vmm, a->gran, 0, 0, 0));
  CK(cuMemMap(a->vmm, a->gran, 0, a->h, 0));
  CUmemAccessDesc acc = {}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(a->vmm, a->gran, &acc, 1));
  CK(cuMemsetD8(a->vmm, 0, a->gran));
  CK(cuMemAllocManaged(&a->managed, 4096, CU_MEM_ATTACH_GLOBAL));
  memset(reinterpret_cast<void*>(a->managed), 0, 4096);
  a->host = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(a->host, 0, 4096);
  CK(cuMemHostRegister(a->host, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  CK(cuMemHostGetDevicePointer(&a->hostdev, a->host, 0));
  CK(cuCtxSynchronize());
  return 0;
}

// A fresh context per kind: a fault poisons it.
static void Poke(CUdevice dev, const char* kind, CUdeviceptr p, bool read_back) {
  CUcontext c; CUctxCreateParams params = {};
  if (cuCtxCreate(&c, &params, 0, dev) != CUDA_SUCCESS) { printf("no context\n"); return; }
  CUmodule m; CUfunction f; CUstream s;
  cuModuleLoadData(&m, image); cuModuleGetFunction(&f, m, "poke");
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  void* args[] = {&p};
  CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr);
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
  printf("%-34s kernel in a new context: %s", kind, Err(r));
  if (r == CUDA_SUCCESS && read_back) {
    unsigned long long v = 0;
    CUresult rc = cuMemcpyDtoHAsync(&v, p, 8, s);
    if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(s);
    printf("; async copy from its stream: %s, value %llu", Err(rc), v);
  }
  printf("\n");
  cuCtxDestroy(c);
}

static void CleanUpFromAnother(CUdevice dev, Allocs* a) {
  CUcontext c; CUctxCreateParams params = {};
  cuCtxCreate(&c, &params, 0, dev);
  printf("  from another context: cuMemHostUnregister %s", Err(cuMemHostUnregister(a->host)));
  printf(", cuMemUnmap %s", Err(cuMemUnmap(a->vmm, a->gran)));
  printf(", cuMemAddressFree %s", Err(cuMemAddressFree(a->vmm, a->gran)));
  printf(", cuMemRelease %s\n", Err(cuMemRelease(a->h)));
  cuCtxDestroy(c);
}

// Every kind, each from a fresh context, then cleanup from yet another.
static void PokeEachFromANewContext(CUdevice dev, Allocs* m) {
  Poke(dev, "vmm (cuMemCreate+Map)", m->vmm, true);
  Poke(dev, "host registered PORTABLE", m->hostdev, true);
  printf("  host value %llu\n", *static_cast<unsigned long long*>(m->host));
  Poke(dev, "managed", m->managed, true);
  Poke(dev, "cuMemAlloc", m->plain, true);
  CleanUpFromAnother(dev, m);
}

int main() {
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  int vmm_ok = 0; cuDeviceGetAttribute(&vmm_ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  printf("VMM supported: %d\n", vmm_ok);
  FILE* fp = fopen("poke.cubin", "rb"); if (!fp) { printf("no poke.cubin\n"); return 1; }
  fread(image, 1, sizeof(image), fp); fclose(fp);

  printf("== 1. allocations made in context A, then cuCtxDestroy(A)\n");
  {
    CUcontext a; CUctxCreateParams params = {};
    CK(cuCtxCreate(&a, &params, 0, dev));
    Allocs m; if (Make(dev, &m)) return 1;
    CK(cuCtxDestroy(a));
    PokeEachFromANewContext(dev, &m);
  }
  printf("== 2. allocations made in the primary context, then cuDevicePrimaryCtxReset\n");
  {
    CUcontext p; CK(cuDevicePrimaryCtxRetain(&p, dev)); CK(cuCtxSetCurrent(p));
    Allocs m; if (Make(dev, &m)) return 1;
    CK(cuDevicePrimaryCtxReset(dev));
    PokeEachFromANewContext(dev, &m);
  }
  printf("== 3. allocations in A; B loads and runs while A lives; A destroyed; B runs again\n");
  {
    CUcontext a, b; CUctxCreateParams params = {};
    CK(cuCtxCreate(&a, &params, 0, dev));
    Allocs m; if (Make(dev, &m)) return 1;
    CK(cuCtxCreate(&b, &params, 0, dev));
    CUmodule mod; CUfunction f; CK(cuModuleLoadData(&mod, image)); CK(cuModuleGetFunction(&f, mod, "poke"));
    void* args[] = {&m.vmm};
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr)); CK(cuCtxSynchronize());
    CK(cuCtxDestroy(a));
    CK(cuCtxSetCurrent(b));
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
    if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
    unsigned long long v = 0; cuMemcpyDtoH(&v, m.vmm, 8);
    printf("vmm: B's kernel after A's destruction: %s, value %llu (2 expected)\n", Err(r), v);
    void* args2[] = {&m.hostdev};
    r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args2, nullptr);
    if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
    printf("host registered: B's kernel after A's destruction: %s, value %llu\n", Err(r), *static_cast<unsigned long long*>(m.host));
    cuCtxDestroy(b);
  }
  return 0;
}
