// Internal to src/program: JSON in and out for the file formats (safetensors
// headers, bundle metadata). Every nlohmann-json exception becomes a
// refgrad::Error, and every message starts with `what`, which names the file
// and the part being read: "model.safetensors: results[0]: no 'engine'".
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace refgrad::detail {

// Parses `text`, rejecting a key repeated within one object (nlohmann-json
// would keep the last one silently).
nlohmann::json parse_json(std::string_view text, std::string_view what);

// Compact JSON; a string that is not valid UTF-8 is an error, not a
// replacement character.
std::string dump_json(const nlohmann::json& value, std::string_view what);

// At most `limit` characters of value's JSON, for messages about values of any size.
std::string json_excerpt(const nlohmann::json& value, std::size_t limit = 40);

// `value` is an object with exactly these keys.
void check_keys(const nlohmann::json& value, std::initializer_list<std::string_view> keys, std::string_view what);

// `value` is an object whose values are all strings.
std::map<std::string, std::string> string_map(const nlohmann::json& value, std::string_view what);

}  // namespace refgrad::detail
