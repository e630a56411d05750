# The CUDA backends (core/gpu/). Compiled for Hopper and Blackwell; CI compiles and links them
# without a GPU, and they report not_run at run time when no device is present.
#
# Targets:
#   moenum_gpu_objs     OBJECT: kernels, cuBLASLt engine, backends (every arch in the list)
#   moenum_gpu_cutlass  OBJECT: the CUTLASS sm_90a grouped GEMMs (only when CUTLASS headers are
#                       found and 90a is in the arch list; they use wgmma, so 90a only)
#   moenum_gpu          INTERFACE: carries the object files of both as sources, so every consumer
#                       (_core, moenum_tests, moenum_gpu_tests) links all of them and the linker
#                       cannot drop the self-registering backends (a static archive would).
#   moenum_gpu_tests    the GPU gtests (tests/gpu/), when MOENUM_BUILD_TESTS; they skip without a GPU.
# Before enable_language: it would set nvcc's own default (sm_75 with CUDA 13, sm_52 before), which
# leaves out the CUTLASS kernels. A list given on the command line or in CUDAARCHS wins.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES 90a 100a)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

# ---- CUTLASS headers: CUTLASS_INCLUDE_DIR, else the PyPI wheel nvidia-cutlass --------------------
# The wheel ships the C++ headers under cutlass_library/source/include (cute/ and cutlass/). We ask
# Python where the package is without importing it (find_spec does not run its __init__).
set(CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include dir (holds cutlass/ and cute/); empty = ask Python for nvidia-cutlass")
if(NOT CUTLASS_INCLUDE_DIR)
  if(NOT Python_EXECUTABLE AND NOT Python3_EXECUTABLE)
    find_package(Python3 QUIET COMPONENTS Interpreter)
  endif()
  set(_moenum_py "${Python_EXECUTABLE}")
  if(NOT _moenum_py)
    set(_moenum_py "${Python3_EXECUTABLE}")
  endif()
  if(_moenum_py)
    execute_process(
      COMMAND "${_moenum_py}" -c
        "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(s.submodule_search_locations[0], 'source', 'include') if s else '')"
      OUTPUT_VARIABLE _moenum_cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_moenum_cutlass_inc AND EXISTS "${_moenum_cutlass_inc}/cutlass/cutlass.h")
      set(CUTLASS_INCLUDE_DIR "${_moenum_cutlass_inc}" CACHE PATH "CUTLASS include dir" FORCE)
    endif()
  endif()
endif()
set(MOENUM_CUTLASS OFF)
list(FIND CMAKE_CUDA_ARCHITECTURES 90a _moenum_has_90a)
if(CUTLASS_INCLUDE_DIR AND EXISTS "${CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h" AND NOT _moenum_has_90a EQUAL -1)
  set(MOENUM_CUTLASS ON)
endif()
message(STATUS "moenum: CUTLASS grouped GEMM (sm_90a) ${MOENUM_CUTLASS} [${CUTLASS_INCLUDE_DIR}]")

# ---- sources ------------------------------------------------------------------------------------
file(GLOB_RECURSE MOENUM_GPU_SOURCES CONFIGURE_DEPENDS core/gpu/*.cu core/gpu/*.cpp)
file(GLOB_RECURSE MOENUM_GPU_CUTLASS_SOURCES CONFIGURE_DEPENDS core/gpu/sm90/*.cu core/gpu/sm90/*.cpp)
if(MOENUM_GPU_CUTLASS_SOURCES)
  list(REMOVE_ITEM MOENUM_GPU_SOURCES ${MOENUM_GPU_CUTLASS_SOURCES})
endif()

add_library(moenum_gpu INTERFACE)
target_include_directories(moenum_gpu INTERFACE core/include core/gpu)
target_link_libraries(moenum_gpu INTERFACE CUDA::cudart CUDA::cublasLt CUDA::cublas)
target_compile_definitions(moenum_gpu INTERFACE MOENUM_HAVE_CUDA=1)

# ---- NCCL: the nccl EP transport (bindings/bind_nccl.cpp); the toolkit's copy, else the system's ---
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} PATH_SUFFIXES lib64 lib)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  target_include_directories(moenum_gpu INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(moenum_gpu INTERFACE ${NCCL_LIBRARY})
  target_compile_definitions(moenum_gpu INTERFACE MOENUM_HAVE_NCCL=1)
endif()
message(STATUS "moenum: NCCL transport ${NCCL_LIBRARY}")

if(MOENUM_GPU_SOURCES)
  add_library(moenum_gpu_objs OBJECT ${MOENUM_GPU_SOURCES})
  target_include_directories(moenum_gpu_objs PUBLIC core/include core/gpu)
  # after core/gpu: core/gpu/oracle/ implements reference/device_gemm.h (the oracles' GEMM device)
  target_include_directories(moenum_gpu_objs PRIVATE reference)
  target_link_libraries(moenum_gpu_objs PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas Eigen3::Eigen OpenMP::OpenMP_CXX)
  target_compile_definitions(moenum_gpu_objs PUBLIC MOENUM_HAVE_CUDA=1)
  # --fmad=false: the elementwise kernels must round exactly like the CPU reference, which is built
  # with -ffp-contract=off; an FMA is written out as fmaf where one is wanted.
  target_compile_options(moenum_gpu_objs PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --fmad=false>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -ffp-contract=off>)
  if(MOENUM_CUTLASS)
    target_compile_definitions(moenum_gpu_objs PUBLIC MOENUM_HAVE_CUTLASS=1)
  endif()
  target_sources(moenum_gpu INTERFACE $<TARGET_OBJECTS:moenum_gpu_objs>)
endif()

if(MOENUM_CUTLASS AND MOENUM_GPU_CUTLASS_SOURCES)
  add_library(moenum_gpu_cutlass OBJECT ${MOENUM_GPU_CUTLASS_SOURCES})
  set_target_properties(moenum_gpu_cutlass PROPERTIES CUDA_ARCHITECTURES 90a)
  target_include_directories(moenum_gpu_cutlass PRIVATE core/include core/gpu)
  # cutlass/util/packed_stride.hpp sits in tools/util/include next to include/ in the wheel
  target_include_directories(moenum_gpu_cutlass SYSTEM PRIVATE ${CUTLASS_INCLUDE_DIR}
                             ${CUTLASS_INCLUDE_DIR}/../tools/util/include)
  target_link_libraries(moenum_gpu_cutlass PRIVATE CUDA::cudart)
  target_compile_definitions(moenum_gpu_cutlass PRIVATE MOENUM_HAVE_CUDA=1 MOENUM_HAVE_CUTLASS=1)
  target_compile_options(moenum_gpu_cutlass PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wno-psabi>)
  target_sources(moenum_gpu INTERFACE $<TARGET_OBJECTS:moenum_gpu_cutlass>)
  target_compile_definitions(moenum_gpu INTERFACE MOENUM_HAVE_CUTLASS=1)
endif()

# ---- GPU gtests: skip (never pass) without a GPU ------------------------------------------------
if(MOENUM_BUILD_TESTS)
  file(GLOB MOENUM_GPU_TEST_SOURCES CONFIGURE_DEPENDS tests/gpu/*.cu tests/gpu/*.cpp)
  if(MOENUM_GPU_TEST_SOURCES)
    enable_testing()
    find_package(GTest REQUIRED)
    include(GoogleTest)
    add_executable(moenum_gpu_tests ${MOENUM_GPU_TEST_SOURCES} ${MOENUM_LINK_OBJECTS})
    target_link_libraries(moenum_gpu_tests PRIVATE moenum_core moenum_gpu GTest::gtest GTest::gtest_main)
    target_include_directories(moenum_gpu_tests PRIVATE core/include core/gpu tests/gpu tests/cpp)
    target_compile_options(moenum_gpu_tests PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --fmad=false>
                           $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
    # PRE_TEST: listing the tests happens under ctest, not at build time (CI builds without a GPU).
    gtest_discover_tests(moenum_gpu_tests DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS gpu)
  endif()
endif()

# ---- GPU benches: off by default, scripts/gpu-check.sh turns them on -----------------------------
#   moenum_gpu_bench        bench/gpu_gemm_bench.cu   forward grouped GEMM of the engines
#   moenum_gpu_layer_bench  bench/gpu_layer_bench.cu  the whole layer, graph replay, MXFP8 quantize
#   moenum_gemm_capi        bench/gpu_gemm_capi.cu    gpu.grouped's fprop for torch (ctypes)
option(MOENUM_GPU_BENCH "Build the GPU benches (bench/gpu_*.cu)" OFF)
if(MOENUM_GPU_BENCH)
  foreach(bench IN ITEMS moenum_gpu_bench:gpu_gemm_bench moenum_gpu_layer_bench:gpu_layer_bench)
    string(REPLACE ":" ";" parts ${bench})
    list(GET parts 0 target)
    list(GET parts 1 source)
    add_executable(${target} bench/${source}.cu ${MOENUM_LINK_OBJECTS})
    target_link_libraries(${target} PRIVATE moenum_core moenum_gpu)
    target_include_directories(${target} PRIVATE core/include core/gpu)
  endforeach()
  if(MOENUM_CUTLASS AND MOENUM_GPU_CUTLASS_SOURCES)
    add_library(moenum_gemm_capi SHARED bench/gpu_gemm_capi.cu ${MOENUM_LINK_OBJECTS})
    target_link_libraries(moenum_gemm_capi PRIVATE moenum_core moenum_gpu)
    target_include_directories(moenum_gemm_capi PRIVATE core/include core/gpu)
  endif()
endif()
