# verl_add_test(NAME name SOURCES a.cc b.cc LIBS lib1 lib2)
# One Catch2 executable per test directory; CTest runs it as one test named NAME.
function(verl_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE verl_catch_main ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE VERL_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                              VERL_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --durations no)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  # One OpenMP thread: LibTorch's thread pool spin-waits, which makes tests crawl on a busy 2-core machine.
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}" ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()
