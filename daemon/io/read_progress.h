// One read's progress across partial results, shared by the backends.
#pragma once

#include <algorithm>
#include <cstdint>

#include "io/io_backend.h"

namespace moetier {

struct ReadProgress {
  ReadRequest request;
  uint64_t position = 0;  // where the current attempt starts, from request.offset
  uint64_t done = 0;      // bytes known valid from request.offset

  uint64_t attempt_offset() const { return request.offset + position; }
  uint64_t attempt_length() const { return request.length - position; }
  uint8_t* attempt_dest() const { return request.dest + position; }

  // Applies the byte count of one attempt. Returns true when the read is
  // finished (complete, or the file ended); false when the rest must be
  // read, from `position`, which stays aligned: O_DIRECT refuses anything
  // else, so a partial block is read again rather than continued.
  bool OnBytes(uint64_t bytes, uint64_t alignment) {
    if (bytes == 0) return true;  // end of file
    done = std::max(done, position + bytes);
    if (done >= request.length) {
      done = request.length;
      return true;
    }
    const uint64_t next = done / alignment * alignment;
    if (next <= position) return true;  // the file ends inside this block
    position = next;
    return false;
  }
};

}  // namespace moetier
