// Invariant checks for the CPU backend: a broken invariant aborts with file
// and line; it is never an operational error.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MOETIER_CPU_CHECK(cond, what)                                                          \
  do {                                                                                         \
    if (!(cond)) [[unlikely]] {                                                                \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, what); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)
