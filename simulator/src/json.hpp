// A small JSON reader (run descriptions only; no external dependency needed).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace numasim {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object; // ordered: iteration is deterministic

  bool is_null() const { return type == Type::Null; }
  bool has(const std::string& key) const { return type == Type::Object && object.count(key) > 0; }
  const Json* find(const std::string& key) const
  {
    if (type != Type::Object)
      return nullptr;
    auto it = object.find(key);
    return it == object.end() ? nullptr : &it->second;
  }
  // Textual form of scalars (env values may be given as numbers or strings).
  std::string scalar_text() const;
};

// Parses `text`; on syntax error throws InputError(file, "JSON", ...).
Json parse_json(const std::string& text, const std::string& file);
Json load_json_file(const std::string& path);
std::string json_escape(const std::string& s);

} // namespace numasim
