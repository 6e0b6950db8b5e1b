/* null_cuda.c - a libcuda.so.1 that does nothing and counts its calls.
 *
 * Every driver entry point attnc resolves succeeds at once: a device of
 * compute capability 9.0 with 132 multiprocessors, allocations at fresh
 * addresses that are never touched, launches that run nothing, events that
 * say 1 microsecond. Loaded in place of the real driver (LD_LIBRARY_PATH),
 * it lets a test see which driver work a call does, and how long attnc's
 * own host path takes, on a machine without a GPU. attnc_null_calls(name)
 * is the count of one entry point since attnc_null_reset(); an empty name
 * gives the count of all of them; attnc_null_report() lists the nonzero
 * ones. NVRTC opens libcuda.so.1 too and asks it for an export table,
 * which this driver does not have (NVRTC then compiles without one). */
#include <cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NULL_CUDA_ENTRIES(X)                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount)           \
  X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)       \
  X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                 \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)                \
  X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)               \
  X(cuMemcpyDtoH) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemcpyDtoHAsync)      \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD32Async)                       \
  X(cuStreamSynchronize) X(cuStreamIsCapturing) X(cuStreamCreate)              \
  X(cuStreamDestroy) X(cuStreamBeginCapture) X(cuStreamEndCapture)             \
  X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy)                 \
  X(cuGraphDestroy) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)        \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime)                  \
  X(cuGetErrorName) X(cuGetErrorString) X(cuTensorMapEncodeTiled)           \
  X(cuGetExportTable)

/* The base names (cuda.h renames some entry points to versioned symbols;
 * the counters keep the names a reader knows). */
#define NULL_CUDA_ENUM(Name) NC_##Name,
enum { NULL_CUDA_ENTRIES(NULL_CUDA_ENUM) NC_COUNT };
#define NULL_CUDA_NAME(Name) #Name,
static const char *const Names[NC_COUNT] = {NULL_CUDA_ENTRIES(NULL_CUDA_NAME)};
static unsigned long long Calls[NC_COUNT];
#define COUNT(Name) __atomic_fetch_add(&Calls[NC_##Name], 1, __ATOMIC_RELAXED)

unsigned long long attnc_null_calls(const char *Name) {
  unsigned long long Sum = 0;
  for (int I = 0; I < NC_COUNT; ++I)
    if (!*Name || !strcmp(Name, Names[I]))
      Sum += __atomic_load_n(&Calls[I], __ATOMIC_RELAXED);
  return Sum;
}

void attnc_null_reset(void) {
  for (int I = 0; I < NC_COUNT; ++I)
    __atomic_store_n(&Calls[I], 0, __ATOMIC_RELAXED);
}

/* "name count, ..." of the nonzero counters into Buf. */
void attnc_null_report(char *Buf, size_t Size) {
  size_t At = 0;
  Buf[0] = 0;
  for (int I = 0; I < NC_COUNT && At < Size; ++I)
    if (Calls[I])
      At += (size_t)snprintf(Buf + At, Size - At, "%s%s %llu", At ? ", " : "",
                             Names[I], Calls[I]);
}

static uintptr_t NextAddress = 0x100000000000ull;

static void *handle(void) { return malloc(16); }

CUresult cuInit(unsigned Flags) { COUNT(cuInit); return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *V) { COUNT(cuDriverGetVersion); *V = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *D, int Ordinal) { COUNT(cuDeviceGet); *D = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *N) { COUNT(cuDeviceGetCount); *N = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGetName(char *Name, int Len, CUdevice D) {
  COUNT(cuDeviceGetName);
  snprintf(Name, (size_t)Len, "attnc null driver");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *V, CUdevice_attribute A, CUdevice D) {
  COUNT(cuDeviceGetAttribute);
  switch (A) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *V = 9; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *V = 0; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *V = 232448; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *V = 132; break;
  default: *V = 1; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *C, CUdevice D) {
  COUNT(cuDevicePrimaryCtxRetain);
  *C = (CUcontext)0x1;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext C) { COUNT(cuCtxSetCurrent); return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *C) { COUNT(cuCtxGetCurrent); *C = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *D) { COUNT(cuCtxGetDevice); *D = 0; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { COUNT(cuCtxSynchronize); return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *M, const void *Image) {
  COUNT(cuModuleLoadData);
  *M = (CUmodule)handle();
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule M) { COUNT(cuModuleUnload); free(M); return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *F, CUmodule M, const char *Name) {
  COUNT(cuModuleGetFunction);
  *F = (CUfunction)handle();
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction F, CUfunction_attribute A, int V) {
  COUNT(cuFuncSetAttribute);
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *V, CUfunction_attribute A, CUfunction F) {
  COUNT(cuFuncGetAttribute);
  *V = 0;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction F, unsigned Gx, unsigned Gy, unsigned Gz,
                        unsigned Bx, unsigned By, unsigned Bz, unsigned Smem,
                        CUstream S, void **Params, void **Extra) {
  COUNT(cuLaunchKernel);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *C, CUfunction F, void **Params,
                          void **Extra) {
  COUNT(cuLaunchKernelEx);
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *P, size_t Bytes) {
  COUNT(cuMemAlloc);
  *P = (CUdeviceptr)NextAddress;
  NextAddress += (Bytes + 0xFFFFF) & ~(uintptr_t)0xFFFFF;
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr P) { COUNT(cuMemFree); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD(CUdeviceptr D, const void *S, size_t N) { COUNT(cuMemcpyHtoD); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH(void *D, CUdeviceptr S, size_t N) {
  COUNT(cuMemcpyDtoH);
  memset(D, 0, N);
  return CUDA_SUCCESS;
}
CUresult cuMemAllocHost(void **P, size_t N) {
  COUNT(cuMemAllocHost);
  *P = calloc(1, N ? N : 1);
  return *P ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *P) { COUNT(cuMemFreeHost); free(P); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync(void *D, CUdeviceptr S, size_t N, CUstream St) {
  COUNT(cuMemcpyDtoHAsync);
  memset(D, 0, N);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr D, CUdeviceptr S, size_t N, CUstream St) {
  COUNT(cuMemcpyDtoDAsync);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr D, unsigned char V, size_t N) { COUNT(cuMemsetD8); return CUDA_SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr D, unsigned V, size_t N, CUstream S) {
  COUNT(cuMemsetD32Async);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream S) { COUNT(cuStreamSynchronize); return CUDA_SUCCESS; }
CUresult cuStreamIsCapturing(CUstream S, CUstreamCaptureStatus *St) {
  COUNT(cuStreamIsCapturing);
  *St = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *S, unsigned Flags) { COUNT(cuStreamCreate); *S = (CUstream)handle(); return CUDA_SUCCESS; }
CUresult cuStreamDestroy(CUstream S) { COUNT(cuStreamDestroy); free(S); return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture(CUstream S, CUstreamCaptureMode M) { COUNT(cuStreamBeginCapture); return CUDA_SUCCESS; }
CUresult cuStreamEndCapture(CUstream S, CUgraph *G) { COUNT(cuStreamEndCapture); *G = (CUgraph)handle(); return CUDA_SUCCESS; }
CUresult cuGraphInstantiate(CUgraphExec *E, CUgraph G, unsigned long long Flags) {
  COUNT(cuGraphInstantiate);
  *E = (CUgraphExec)handle();
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec E, CUstream S) { COUNT(cuGraphLaunch); return CUDA_SUCCESS; }
CUresult cuGraphExecDestroy(CUgraphExec E) { COUNT(cuGraphExecDestroy); free(E); return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph G) { COUNT(cuGraphDestroy); free(G); return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent *E, unsigned Flags) { COUNT(cuEventCreate); *E = (CUevent)handle(); return CUDA_SUCCESS; }
CUresult cuEventDestroy(CUevent E) { COUNT(cuEventDestroy); free(E); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent E, CUstream S) { COUNT(cuEventRecord); return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent E) { COUNT(cuEventSynchronize); return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent E) { COUNT(cuEventQuery); return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float *Ms, CUevent A, CUevent B) {
  COUNT(cuEventElapsedTime);
  *Ms = 0.001f;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult R, const char **S) { COUNT(cuGetErrorName); *S = "CUDA_ERROR"; return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult R, const char **S) { COUNT(cuGetErrorString); *S = "attnc null driver"; return CUDA_SUCCESS; }
CUresult cuTensorMapEncodeTiled(CUtensorMap *M, CUtensorMapDataType T, cuuint32_t Rank,
                                void *Global, const cuuint64_t *Dims,
                                const cuuint64_t *Strides, const cuuint32_t *Box,
                                const cuuint32_t *ElemStrides,
                                CUtensorMapInterleave I, CUtensorMapSwizzle Sw,
                                CUtensorMapL2promotion L2, CUtensorMapFloatOOBfill F) {
  COUNT(cuTensorMapEncodeTiled);
  memset(M, 0, sizeof *M);
  return CUDA_SUCCESS;
}
CUresult cuGetExportTable(const void **Table, const CUuuid *Id) {
  COUNT(cuGetExportTable);
  *Table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}
