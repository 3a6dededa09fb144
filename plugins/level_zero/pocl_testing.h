// The CPU OpenCL (pocl) that tests of OpenCL C run on without an Intel GPU: the first platform's first
// device, a context and an in-order queue, and program builds that throw with the build log. Shared by
// pocl_kernels_test.cc (the plugin's kernels) and core/compiler/opencl_test.cc (CINN's generated OpenCL C).
// Header-only; the including test links OpenCL::OpenCL.
#ifndef OAR_PLUGINS_LEVEL_ZERO_POCL_TESTING_H_
#define OAR_PLUGINS_LEVEL_ZERO_POCL_TESTING_H_

#include <CL/cl.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace oar::level_zero {

/// The OpenCL device, context and queue, made once per process; error() says why there are none (the
/// tests then report SKIPPED with it).
class PoclDevice {
 public:
  static PoclDevice& Get() {
    static PoclDevice d;
    return d;
  }
  const std::string& error() const { return error_; }
  cl_device_id device() const { return device_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  /// CL_DEVICE_MAX_WORK_GROUP_SIZE.
  size_t max_group() const { return max_group_; }
  /// Whether the device has fine-grained SVM buffers (a device address is then a host address).
  bool fine_grained_svm() const {
    cl_device_svm_capabilities svm = 0;
    clGetDeviceInfo(device_, CL_DEVICE_SVM_CAPABILITIES, sizeof(svm), &svm, nullptr);
    return (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
  }
  /// Build `source` with `options`; throws std::runtime_error with `what`, the options and the build log.
  cl_program Build(const std::string& source, const std::string& options, const std::string& what) const {
    cl_int err = CL_SUCCESS;
    const char* ptr = source.c_str();
    cl_program p = clCreateProgramWithSource(context_, 1, &ptr, nullptr, &err);
    if (err != CL_SUCCESS) throw std::runtime_error(what + ": clCreateProgramWithSource: " + std::to_string(err));
    if (clBuildProgram(p, 1, &device_, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      size_t size = 0;
      clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
      std::string log(size, '\0');
      clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
      clReleaseProgram(p);
      throw std::runtime_error(what + " did not build on pocl (" + options + "):\n" + log);
    }
    return p;
  }

 private:
  PoclDevice() {
    cl_uint n = 0;
    cl_platform_id platform = nullptr;
    if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0) {
      error_ = "no OpenCL platform (install pocl-opencl-icd: ci/install-deps.sh --level-zero)";
      return;
    }
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device_, &n) != CL_SUCCESS || n == 0) {
      error_ = "the OpenCL platform has no device";
      return;
    }
    clGetDeviceInfo(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(max_group_), &max_group_, nullptr);
    cl_int err = CL_SUCCESS;
    context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    if (err == CL_SUCCESS) queue_ = clCreateCommandQueueWithProperties(context_, device_, nullptr, &err);
    if (err != CL_SUCCESS) error_ = "cannot create an OpenCL context and queue: " + std::to_string(err);
  }
  std::string error_;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  size_t max_group_ = 0;
};

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_POCL_TESTING_H_
