# Dependency discovery. Debian packages through their CMake/pkg-config files; LibTorch and Arrow from the PyPI wheels
# that tools/setup.sh unpacks into VERL_DEPS_DIR (their own CMake configs drag in CUDA/Python discovery, so we
# declare the few libraries we link as imported targets instead).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(spdlog REQUIRED)
find_package(Catch2 REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

set(VERL_PY_DIR ${VERL_DEPS_DIR}/py)
# Where the torch and pyarrow packages are: tools/setup.sh's unpacked wheels by default; on the GPU machine the
# site-packages of its python3 (tools/device/build.sh passes -DVERL_PYTHON_SITE=...). Each can also be set alone.
set(VERL_PYTHON_SITE ${VERL_PY_DIR} CACHE PATH "A folder holding the torch/ and pyarrow/ Python packages")
set(VERL_TORCH_ROOT ${VERL_PYTHON_SITE}/torch CACHE PATH "LibTorch: the torch Python package folder")
set(VERL_PYARROW_ROOT ${VERL_PYTHON_SITE}/pyarrow CACHE PATH "Arrow/Parquet C++: the pyarrow Python package folder")

# LibTorch: only the CPU libraries. Link it PRIVATE only (DESIGN.md, "the wall").
if(NOT EXISTS ${VERL_TORCH_ROOT}/lib/libtorch_cpu.so)
  message(FATAL_ERROR "LibTorch not found in ${VERL_TORCH_ROOT}: run tools/setup.sh")
endif()
add_library(verl_torch INTERFACE IMPORTED GLOBAL)
target_include_directories(verl_torch SYSTEM INTERFACE
  ${VERL_TORCH_ROOT}/include ${VERL_TORCH_ROOT}/include/torch/csrc/api/include)
target_link_libraries(verl_torch INTERFACE
  ${VERL_TORCH_ROOT}/lib/libtorch_cpu.so ${VERL_TORCH_ROOT}/lib/libc10.so)
target_compile_definitions(verl_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_compile_options(verl_torch INTERFACE -Wno-deprecated-declarations)
set(VERL_RPATH ${VERL_TORCH_ROOT}/lib ${VERL_PYARROW_ROOT})
if(EXISTS ${VERL_DEPS_DIR}/nvidia)
  file(GLOB _nv_libs LIST_DIRECTORIES true ${VERL_DEPS_DIR}/nvidia/nvidia/*/lib)
  list(APPEND VERL_RPATH ${_nv_libs})
endif()

# Arrow + Parquet C++ from the pyarrow wheel (versioned sonames only).
file(GLOB _arrow_so ${VERL_PYARROW_ROOT}/libarrow.so.[0-9]*)
file(GLOB _parquet_so ${VERL_PYARROW_ROOT}/libparquet.so.[0-9]*)
if(NOT _arrow_so OR NOT _parquet_so)
  message(FATAL_ERROR "Arrow/Parquet not found in ${VERL_PYARROW_ROOT}: run tools/setup.sh")
endif()
add_library(verl_arrow INTERFACE IMPORTED GLOBAL)
target_include_directories(verl_arrow SYSTEM INTERFACE ${VERL_PYARROW_ROOT}/include)
target_link_libraries(verl_arrow INTERFACE ${_parquet_so} ${_arrow_so})

# CUDA runtime and NCCL, only with -DVERL_WITH_CUDA=ON (the NCCL communicator, target verl_nccl_comm). NCCL comes
# from the pip package nvidia-nccl-cu13 (the one torch depends on) unless VERL_NCCL_ROOT names another folder with
# include/nccl.h and lib/libnccl.so.2.
if(VERL_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT DEFINED CACHE{VERL_NCCL_ROOT})
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_nccl_default "")
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(nvidia.nccl.__path__[0])"
                      OUTPUT_VARIABLE _nccl_default OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    set(VERL_NCCL_ROOT "${_nccl_default}" CACHE PATH "NCCL: a folder with include/nccl.h and lib/libnccl.so.2")
  endif()
  if(NOT EXISTS "${VERL_NCCL_ROOT}/include/nccl.h" OR NOT EXISTS "${VERL_NCCL_ROOT}/lib/libnccl.so.2")
    message(FATAL_ERROR "NCCL not found in VERL_NCCL_ROOT='${VERL_NCCL_ROOT}' (want include/nccl.h and "
                        "lib/libnccl.so.2): pip install nvidia-nccl-cu13 or pass -DVERL_NCCL_ROOT=...")
  endif()
  # LibTorch's CUDA backend: nothing references its symbols directly (it registers itself when loaded), so keep the
  # linker from dropping it.
  if(NOT EXISTS ${VERL_TORCH_ROOT}/lib/libtorch_cuda.so)
    message(FATAL_ERROR "VERL_WITH_CUDA=ON but ${VERL_TORCH_ROOT}/lib has no libtorch_cuda.so (a CPU-only torch?)")
  endif()
  target_link_libraries(verl_torch INTERFACE -Wl,--no-as-needed ${VERL_TORCH_ROOT}/lib/libtorch_cuda.so
                        ${VERL_TORCH_ROOT}/lib/libc10_cuda.so -Wl,--as-needed)
  add_library(verl_nccl INTERFACE IMPORTED GLOBAL)
  target_include_directories(verl_nccl SYSTEM INTERFACE ${VERL_NCCL_ROOT}/include)
  target_link_libraries(verl_nccl INTERFACE ${VERL_NCCL_ROOT}/lib/libnccl.so.2 CUDA::cudart)
  list(APPEND VERL_RPATH ${VERL_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})
  message(STATUS "CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}), NCCL in ${VERL_NCCL_ROOT}")
endif()

set(CMAKE_BUILD_RPATH ${VERL_RPATH})
set(CMAKE_INSTALL_RPATH ${VERL_RPATH})
