# Compile options applied to the project's own targets (never to generated code).
set(MOETIER_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wimplicit-fallthrough -Wformat=2 -Wundef)
if(MOETIER_WERROR)
  list(APPEND MOETIER_WARNING_FLAGS -Werror)
endif()
# GCC 12 at -O3 reports -Wrestrict inside libstdc++'s std::string for plain
# concatenations (GCC bug 105329, fixed in 13); it is noise, not our code.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND MOETIER_WARNING_FLAGS -Wno-restrict)
endif()

if(MOETIER_SANITIZE)
  set(MOETIER_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
  add_compile_options(${MOETIER_SANITIZER_FLAGS})
  add_link_options(${MOETIER_SANITIZER_FLAGS})
endif()

# moetier_target_defaults(<target>): warnings (as errors) for code we write.
function(moetier_target_defaults target)
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:${MOETIER_WARNING_FLAGS}>)
endfunction()
