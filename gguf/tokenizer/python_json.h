// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes
// it, which is what the chat templates' `tojson` filter prints under Hugging
// Face's apply_chat_template (and llama.cpp's Jinja engine, which follows
// it). Prompts must match the bytes the model was trained on, so spacing,
// key order and number forms all matter.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace moetier {

// json.dumps(value, ensure_ascii=False): ", " between items, ": " after
// keys, keys in the object's own order; strings escape only \" \\ \n \r \t
// \b \f and other control characters (as \u00xx), everything else is kept as
// UTF-8 bytes; integers as integers; floats as Python's repr (1.0, 0.1,
// 1e-05, 1e+16, NaN, Infinity, -Infinity).
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

// Python's str() of a scalar JSON value, as the Jinja `string` filter gives
// it: a string as itself, True / False, None, integers, floats as repr.
// Objects and arrays are written as PythonJsonDumps writes them (templates
// call tojson on those).
std::string PythonStr(const nlohmann::ordered_json& value);

// Python's repr(float) ("shortest repr" style).
std::string PythonFloatRepr(double value);

}  // namespace moetier
