// Broken invariants in the store code (daemon and client side) abort with
// file and line; operational errors are absl::Status values instead.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MOETIER_STORE_CHECK(cond)                                                   \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
