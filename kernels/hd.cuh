// LINMETA_HD marks functions compiled for both the host and the device.
#pragma once

#if defined(__CUDACC__)
#define LINMETA_HD __host__ __device__
#else
#define LINMETA_HD
#endif
