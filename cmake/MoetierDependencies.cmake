# Every dependency comes from a Debian 12 package (deploy/setup.sh installs them).
find_package(Protobuf REQUIRED)            # Debian ships no protobuf-config.cmake
find_package(absl CONFIG REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
# Debian builds cpp-httplib as a shared library; its pkg-config file names it.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(nlohmann_json 3.11 CONFIG REQUIRED)
find_package(Threads REQUIRED)
if(MOETIER_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
