// MOETIER_RETURN_IF_ERROR: hands a failed absl::Status to the caller.
#pragma once

#include "absl/status/status.h"

// Returns the Status of `expr` from the enclosing function (or lambda) when
// it is not OK.
#define MOETIER_RETURN_IF_ERROR(expr)           \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (false)
