# Man pages made from each installed program's --help by help2man (Debian's
# help2man package), compressed as Debian wants them. Without help2man the
# build and install go on without man pages; deploy/setup.sh installs it.
find_program(MOETIER_HELP2MAN help2man)
find_program(MOETIER_GZIP gzip)
if(NOT MOETIER_HELP2MAN OR NOT MOETIER_GZIP)
  message(STATUS "help2man or gzip not found: no man pages")
  set(MOETIER_MAN_PAGES OFF CACHE INTERNAL "")
  return()
endif()
set(MOETIER_MAN_PAGES ON CACHE INTERNAL "whether the install has man pages")

# "program|the line under NAME"
set(moetier_man_programs
    "moetierd|Mixture-of-Experts model server: expert store, workers and the gRPC API"
    "moetier-worker|runs a model on one device for moetierd, or standalone"
    "moetier|client of moetierd: generate, chat, score, status"
    "moetier-inspect|print what a GGUF model holds without loading its weights"
    "moetier-synth|write a GGUF model with deterministic random weights"
    "moetier-policy-lab|replay expert-routing traces through the expert cache policies"
    "moetier-tracegen|write expert-routing traces from a calibrated model")

set(moetier_man_dir ${CMAKE_CURRENT_BINARY_DIR}/man)
set(moetier_man_files)
foreach(entry ${moetier_man_programs})
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 program)
  list(GET entry 1 summary)
  if(NOT TARGET ${program})
    continue()
  endif()
  set(page ${moetier_man_dir}/${program}.1)
  add_custom_command(
    OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${moetier_man_dir}
    COMMAND ${MOETIER_HELP2MAN} --no-info --section=1
            --version-string=${PROJECT_VERSION} --name=${summary} --output=${page}
            $<TARGET_FILE:${program}>
    COMMAND ${MOETIER_GZIP} -9nf ${page}
    DEPENDS ${program}
    COMMENT "Man page of ${program}"
    VERBATIM)
  list(APPEND moetier_man_files ${page}.gz)
endforeach()
add_custom_target(moetier_man_pages ALL DEPENDS ${moetier_man_files})
install(FILES ${moetier_man_files} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
