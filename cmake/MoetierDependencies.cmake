# Every dependency comes from a Debian 12 package (deploy/setup.sh installs them).
find_package(Protobuf REQUIRED)            # Debian ships no protobuf-config.cmake
find_package(absl CONFIG REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
find_package(Threads REQUIRED)
if(MOETIER_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
