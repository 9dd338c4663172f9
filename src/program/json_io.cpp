// JSON helpers shared by the safetensors reader and the bundle metadata (json_io.hpp).
#include "json_io.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include "refgrad/error.hpp"

namespace refgrad::detail {

using nlohmann::json;

json parse_json(std::string_view text, std::string_view what) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  const json::parser_callback_t reject_duplicate_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) keys_of_open_objects.pop_back();
    if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      check(keys_of_open_objects.back().insert(key).second, what, ": duplicate key '", key, "'");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), reject_duplicate_keys);
  } catch (const json::exception& error) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, ...": keep the sentence.
    const std::string_view message = error.what();
    const auto end_of_tag = message.find("] ");
    fail(concat(what, ": invalid JSON: ",
                end_of_tag == std::string_view::npos ? message : message.substr(end_of_tag + 2)));
  }
}

std::string dump_json(const json& value, std::string_view what) {
  try {
    return value.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    fail(concat(what, ": a name or string is not valid UTF-8"));
  }
}

namespace {

// Writes value's JSON into `out` until `out` passes `limit`: the descent stops there, so a
// hostile value nested a million deep costs `limit` stack frames at most.
void append_excerpt(const json& value, std::size_t limit, std::string& out) {
  if (!value.is_structured()) {
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  out += value.is_array() ? '[' : '{';
  bool first = true;
  for (const auto& item : value.items()) {
    if (out.size() > limit) break;
    if (!first) out += ',';
    first = false;
    if (value.is_object()) out += json(item.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ":";
    append_excerpt(item.value(), limit, out);
  }
  out += value.is_array() ? ']' : '}';
}

}  // namespace

std::string json_excerpt(const json& value, std::size_t limit) {
  std::string text;
  append_excerpt(value, limit, text);
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

void check_keys(const json& value, std::initializer_list<std::string_view> keys, std::string_view what) {
  check(value.is_object(), what, ": ", json_excerpt(value), " is not an object");
  for (const auto& item : value.items()) {
    check(std::find(keys.begin(), keys.end(), item.key()) != keys.end(), what, ": unexpected key '", item.key(),
          "'");
  }
  for (std::string_view key : keys) check(value.contains(key), what, ": no '", key, "'");
}

std::map<std::string, std::string> string_map(const json& value, std::string_view what) {
  check(value.is_object(), what, ": ", json_excerpt(value), " is not an object of strings");
  std::map<std::string, std::string> strings;
  for (const auto& item : value.items()) {
    check(item.value().is_string(), what, ": the value of '", item.key(), "' is not a string");
    strings.emplace(item.key(), item.value().get<std::string>());
  }
  return strings;
}

}  // namespace refgrad::detail
