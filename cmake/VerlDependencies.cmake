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

# LibTorch: only the CPU libraries. Link it PRIVATE only (DESIGN.md, "the wall").
set(VERL_TORCH_ROOT ${VERL_PY_DIR}/torch)
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
set(VERL_RPATH ${VERL_TORCH_ROOT}/lib ${VERL_PY_DIR}/pyarrow)
if(EXISTS ${VERL_DEPS_DIR}/nvidia)
  file(GLOB _nv_libs LIST_DIRECTORIES true ${VERL_DEPS_DIR}/nvidia/nvidia/*/lib)
  list(APPEND VERL_RPATH ${_nv_libs})
endif()

# Arrow + Parquet C++ from the pyarrow wheel (versioned sonames only).
file(GLOB _arrow_so ${VERL_PY_DIR}/pyarrow/libarrow.so.[0-9]*)
file(GLOB _parquet_so ${VERL_PY_DIR}/pyarrow/libparquet.so.[0-9]*)
if(NOT _arrow_so OR NOT _parquet_so)
  message(FATAL_ERROR "Arrow/Parquet not found in ${VERL_PY_DIR}/pyarrow: run tools/setup.sh")
endif()
add_library(verl_arrow INTERFACE IMPORTED GLOBAL)
target_include_directories(verl_arrow SYSTEM INTERFACE ${VERL_PY_DIR}/pyarrow/include)
target_link_libraries(verl_arrow INTERFACE ${_parquet_so} ${_arrow_so})

set(CMAKE_BUILD_RPATH ${VERL_RPATH})
set(CMAKE_INSTALL_RPATH ${VERL_RPATH})
