# CUDA is optional: without nvcc every other target still builds and tests.
set(MOETIER_HAVE_CUDA OFF)
if(MOETIER_ENABLE_CUDA)
  # /usr/local/cuda/bin is on PATH only through /etc/profile.d, so look there too.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Turing through Blackwell: every architecture CUDA 13 still supports.
      set(CMAKE_CUDA_ARCHITECTURES "75;80;86;89;90;100;120")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MOETIER_HAVE_CUDA ON)
    message(STATUS "moetier: CUDA targets enabled for architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "moetier: nvcc not found, CUDA targets disabled")
  endif()
endif()

# moetier_cuda_defaults(<target>): CUDA sources are C++17. CMake 3.25 knows no
# CUDA20 dialect for nvcc, and without an explicit CUDA_STANDARD it would
# inherit CMAKE_CXX_STANDARD (20) and refuse to generate.
function(moetier_cuda_defaults target)
  set_target_properties(${target} PROPERTIES
      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_RUNTIME_LIBRARY Static)
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
endfunction()
