// MOETIER_CHECK: a broken invariant (a bug, never bad input) aborts with file
// and line. Operational errors are absl::Status values instead.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MOETIER_CHECK(cond)                                                        \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                \
    }                                                                              \
  } while (false)
