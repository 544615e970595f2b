# `cpack -G DEB` in the build folder: moetier_<version>_<arch>.deb with the
# programs, the unit (/lib/systemd/system), the sysusers and tmpfiles files,
# man pages and /etc/moetier/moetierd.conf as a conffile. It installs to /usr;
# the unit's paths follow (deploy/install_unit.cmake.in runs at install time).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME moetier)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "moetier maintainers <maintainers@users.noreply.a-seed-a2dcc7ad.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Mixture-of-Experts model server for GPUs far smaller than the model")
set(CPACK_PACKAGE_DESCRIPTION [[
moetierd serves GGUF Mixture-of-Experts models over gRPC: the dense layers
and a cache of hot experts live in VRAM, every expert in locked RAM, or RAM
is a cache over the model file. moetier is its client.]])
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Everything a plain install has, plus the config that only the package installs.
set(CPACK_INSTALL_CMAKE_PROJECTS
    "${CMAKE_BINARY_DIR};${PROJECT_NAME};ALL;/"
    "${CMAKE_BINARY_DIR};${PROJECT_NAME};package_config;/")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps finds the shared libraries (libcpp-httplib0.11 among them);
# nlohmann-json is header-only, so the package needs nothing at run time for it.
# gzip keeps packaging a debug-info build quick; size is not the point here.
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
# dpkg keeps an administrator's edits of a conffile across upgrades.
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/debian/conffiles CONTENT "${MOETIER_CONFIG_DIR}/moetierd.conf\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/debian/conffiles
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
