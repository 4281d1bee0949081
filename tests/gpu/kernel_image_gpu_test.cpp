// Which code of the finish kernel the driver runs: the build's machine code for the device's
// generation where there is some (binaryVersion), else the newest PTX at or below the device's
// compute capability, JIT-compiled (ptxVersion); under CUDA_FORCE_PTX_JIT=1
// (scripts/gpu-check.sh --force-ptx-jit) always that PTX, whose code for the oldest generation
// has no griddepcontrol.wait, so a PDL builder launches in plain stream order there.
// The build's lists come from tests/CMakeLists.txt (CMAKE_CUDA_ARCHITECTURES or linmeta's
// default, cmake/LinmetaCudaArchitectures.cmake).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_support.hpp"
#include "kernels/finish_launch.hpp"

namespace linmeta::gputest {
namespace {

class KernelImageGpu : public GpuTest {};

TEST_F(KernelImageGpu, TheDevicesMachineCodeRunsElseTheNewestFittingPtx) {
  const std::vector<int> real = LINMETA_TEST_REAL_ARCHS;
  const std::vector<int> virt = LINMETA_TEST_VIRTUAL_ARCHS;
  int device = 0, major = 0, minor = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "major");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "minor");
  const int cc = major * 10 + minor;
  const char* force = std::getenv("CUDA_FORCE_PTX_JIT");
  const bool forced = force != nullptr && std::string(force) == "1";
  // Machine code runs on its own major generation at an equal or higher minor version.
  int sass = 0;
  for (const int a : real)
    if (a / 10 == major && a <= cc) sass = std::max(sass, a);
  int ptx = 0;
  for (const int a : virt)
    if (a <= cc) ptx = std::max(ptx, a);
  const cudaFuncAttributes attr = detail::finish_kernel_attributes();
  SCOPED_TRACE("device sm_" + std::to_string(cc) + ", CUDA_FORCE_PTX_JIT " +
               (forced ? "1" : "unset") + ": binaryVersion " + std::to_string(attr.binaryVersion) +
               ", ptxVersion " + std::to_string(attr.ptxVersion));
  if (forced || sass == 0) {
    ASSERT_NE(ptx, 0) << "the build has no PTX this device can JIT-compile";
    EXPECT_EQ(attr.ptxVersion, ptx);
  } else {
    EXPECT_EQ(attr.binaryVersion, sass);
  }
  EXPECT_EQ(detail::programmatic_launch_waits(device), major >= 9 && attr.ptxVersion >= 90);
}

}  // namespace
}  // namespace linmeta::gputest
