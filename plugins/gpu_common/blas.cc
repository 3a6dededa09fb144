#include "plugins/gpu_common/blas.h"

#include <climits>
#include <mutex>
#include <unordered_map>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/types.h"
#include "plugins/gpu_common/runtime.h"

#if defined(OAR_GPU_CUDA)
#include <cublas_v2.h>
#endif

namespace oar::gpu {
namespace {

void LaunchTiled(int32_t device, gpuStream_t stream, const TensorArg& a, const TensorArg& b, const TensorArg& out,
                 const std::string& where) {
  Check(static_cast<gpuError_t>(LaunchGemm(a, b, out, stream)), ("gemm kernel launch for " + where).c_str(), device);
}

#if defined(OAR_GPU_CUDA)

struct CublasHandles {
  std::mutex mutex;  // held from cublasSetStream to the enqueue: one handle per device, many host threads
  std::unordered_map<int32_t, cublasHandle_t> handles;
};
CublasHandles& Handles() {
  static auto* h = new CublasHandles();
  return *h;
}

void CheckBlas(cublasStatus_t status, const char* api, int32_t device) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const oar_status_code code = status == CUBLAS_STATUS_ALLOC_FAILED      ? OAR_STATUS_RESOURCE_EXHAUSTED
                               : status == CUBLAS_STATUS_NOT_INITIALIZED ? OAR_STATUS_UNAVAILABLE
                                                                         : OAR_STATUS_INTERNAL;
  Fail(code, std::string(api) + " on device " + std::to_string(device) + " failed: " + cublasGetStatusString(status));
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

/// cuBLAS computes out = a @ b when each operand's matrix is row- or column-major and the batch
/// dimensions collapse to one (count, stride) per operand. Returns false (nothing enqueued) otherwise.
bool TryCublas(int32_t device, gpuStream_t stream, const TensorArg& a, const TensorArg& b, const TensorArg& out) {
  const int r = out.rank;
  const int64_t m = out.shape[r - 2], n = out.shape[r - 1], k = a.shape[r - 1];
  const MatrixLayout la = BlasLayout(m, k, a.strides[r - 2], a.strides[r - 1]);
  const MatrixLayout lb = BlasLayout(k, n, b.strides[r - 2], b.strides[r - 1]);
  if (!la.ok || !lb.ok) return false;
  Indexer<3> batch;
  batch.rank = r - 2;
  int64_t out_strides[kMaxRank];
  ContiguousStrides(out.rank, out.shape, out_strides);
  for (int d = 0; d < r - 2; ++d) {
    batch.shape[d] = out.shape[d];
    batch.strides[0][d] = out_strides[d];
    batch.strides[1][d] = a.strides[d];
    batch.strides[2][d] = b.strides[d];
  }
  batch = Coalesce(batch);
  if (batch.rank > 1) return false;
  const int64_t count = batch.rank == 0 ? 1 : batch.shape[0];
  const int64_t stride_c = batch.rank == 0 ? m * n : batch.strides[0][0];
  const int64_t stride_a = batch.rank == 0 ? 0 : batch.strides[1][0];
  const int64_t stride_b = batch.rank == 0 ? 0 : batch.strides[2][0];
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(la.ld) || !FitsInt(lb.ld) || !FitsInt(count)) return false;

  cudaDataType_t type;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // fp32 accumulation for fp32/f16/bf16 (no TF32)
  switch (out.dtype) {
    case OAR_DTYPE_FLOAT32:
      type = CUDA_R_32F;
      break;
    case OAR_DTYPE_FLOAT16:
      type = CUDA_R_16F;
      break;
    case OAR_DTYPE_BFLOAT16:
      type = CUDA_R_16BF;
      break;
    case OAR_DTYPE_FLOAT64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
    default:
      return false;
  }
  if (count == 0 || m == 0 || n == 0) return true;  // nothing to write
  if (k == 0) {                                     // the empty sum: zeros
    OAR_GPU_CHECK(device, cudaMemsetAsync, out.data, 0, static_cast<size_t>(count * m * n) * sdk::DTypeSize(out.dtype),
                  stream);
    return true;
  }
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64) : &beta32;

  CublasHandles& h = Handles();
  std::lock_guard<std::mutex> lock(h.mutex);
  cublasHandle_t& handle = h.handles[device];
  if (handle == nullptr) CheckBlas(cublasCreate(&handle), "cublasCreate", device);
  CheckBlas(cublasSetStream(handle, stream), "cublasSetStream", device);
  // Row-major out = a @ b is column-major out^T = b^T a^T: a row-major operand read column-major is
  // already its transpose (CUBLAS_OP_N), a column-major one needs CUBLAS_OP_T.
  CheckBlas(cublasGemmStridedBatchedEx(
                handle, lb.column_major ? CUBLAS_OP_T : CUBLAS_OP_N, la.column_major ? CUBLAS_OP_T : CUBLAS_OP_N,
                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), alpha, b.data, type,
                static_cast<int>(lb.ld), stride_b, a.data, type, static_cast<int>(la.ld), stride_a, beta, out.data,
                type, static_cast<int>(n), stride_c, static_cast<int>(count), compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx", device);
  return true;
}

#endif

}  // namespace

void Matmul(int32_t device, gpuStream_t stream, const TensorArg& a, const TensorArg& b, const TensorArg& out,
            const std::string& where) {
#if defined(OAR_GPU_CUDA)
  if (TryCublas(device, stream, a, b, out)) return;
#endif
  LaunchTiled(device, stream, a, b, out, where);
}

const char* BlasLibrary() {
#if defined(OAR_GPU_CUDA)
  return "cuBLAS";
#else
  return "";
#endif
}

void ShutdownBlas() {
#if defined(OAR_GPU_CUDA)
  CublasHandles& h = Handles();
  std::lock_guard<std::mutex> lock(h.mutex);
  for (auto& [device, handle] : h.handles) {
    if (handle != nullptr && cudaSetDevice(device) == cudaSuccess) cublasDestroy(handle);
  }
  h.handles.clear();
#endif
}

}  // namespace oar::gpu
