// Run descriptions (docs/interfaces.md §4) as a small tree. The text is parsed by Debian's
// nlohmann-json3 (RFC 8259, strict: no NaN/Infinity, no hex, no trailing text, UTF-8 checked);
// this file only builds the tree config.cpp reads and adds what that parser lets through:
// duplicate keys, numbers out of double range, unbounded nesting.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace numasim {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  // Numbers written without fraction or exponent that fit in int64: `integer` holds them exactly
  // (a seed above 2^53 would not survive the double).
  bool integral = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object; // ordered: iteration is deterministic

  bool is_null() const { return type == Type::Null; }
  bool has(const std::string& key) const { return type == Type::Object && object.count(key) > 0; }
  const Json* find(const std::string& key) const {
    if (type != Type::Object)
      return nullptr;
    auto it = object.find(key);
    return it == object.end() ? nullptr : &it->second;
  }
  // Textual form of scalars (env values may be given as numbers or strings).
  std::string scalar_text() const;
};

// Deepest nesting accepted: a run description nests 3 levels; the bound keeps the tree (and its
// recursive destructor) small whatever the input.
constexpr size_t kMaxJsonDepth = 64;
// Largest run description read: they are a few KB; this stops /dev/zero or a wrong file early.
constexpr size_t kMaxJsonBytes = 16 << 20;
// Largest perf-model or distribution file read: a generated StarPU history model is 7 kB, a
// distribution of 4096 x 4096 tiles (one owner rank and a separator per tile) about 40 MB; a
// link to /dev/zero must not be read until memory runs out.
constexpr size_t kMaxInputBytes = 64 << 20;

// The text of an input file that must be a regular file (a link is followed) of at most `limit`
// bytes, checked before reading; InputError(path, key, what) otherwise.
std::string read_input_file(const std::string& path, const std::string& key, const std::string& what,
                            size_t limit = kMaxInputBytes);

// Parses `text`; on any error throws InputError(file, <where>, <what was expected>).
Json parse_json(const std::string& text, const std::string& file);
Json load_json_file(const std::string& path);
std::string json_escape(const std::string& s);

} // namespace numasim
