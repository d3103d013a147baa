#include "json.hpp"
#include "error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <xbt/log.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_json, numasim, "numasim JSON input");

namespace numasim {

namespace {
using njson = nlohmann::json;

// Builds a Json tree from nlohmann's SAX events. nlohmann's own DOM would keep the last of two
// duplicate keys silently and store 1e400 as inf; a run description with either is a mistake the
// user must hear about, so the events are checked here. The SAX parser itself is iterative, so
// deep nesting reaches start_object/start_array and is refused there, never on the C++ stack.
class TreeBuilder final : public njson::json_sax_t {
public:
  explicit TreeBuilder(Json& root) : root_(root) {}

  std::string error_key, error_expected; // set when a callback returns false

  bool null() override { return place() != nullptr; }
  bool boolean(bool v) override {
    Json* j = place();
    j->type = Json::Type::Bool;
    j->boolean = v;
    return true;
  }
  bool number_integer(number_integer_t v) override {
    Json* j = place();
    j->type = Json::Type::Number;
    j->number = static_cast<double>(v);
    j->integral = true;
    j->integer = v;
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    Json* j = place();
    j->type = Json::Type::Number;
    j->number = static_cast<double>(v);
    // Above int64: still a number, but no exact integer (config.cpp refuses it where one is needed).
    j->integral = v <= static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max());
    j->integer = j->integral ? static_cast<int64_t>(v) : 0;
    return true;
  }
  bool number_float(number_float_t v, const string_t& text) override {
    Json* j = place();
    if (!std::isfinite(v)) // 1e400 parses as inf
      return fail(path(), "a number within double range, got " + text);
    j->type = Json::Type::Number;
    j->number = v;
    return true;
  }
  bool string(string_t& v) override {
    Json* j = place();
    j->type = Json::Type::String;
    j->string = std::move(v);
    return true;
  }
  bool binary(binary_t&) override { return fail(path(), "JSON text (no binary values)"); }
  bool start_object(std::size_t) override { return open(Json::Type::Object); }
  bool key(string_t& k) override {
    Level& l = open_.back();
    l.key = k;
    if (l.node->object.count(k))
      return fail(path(), "each key once per object (a second '" + k + "' would silently replace the first)");
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(Json::Type::Array); }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    // what() = "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error
    // while parsing value - invalid literal; last read: 'NaN'": the id is noise for the user.
    std::string what = ex.what();
    if (auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    // The key being read helps find the spot in a long description ("near workload.n").
    return fail(open_.empty() ? "JSON" : "JSON near " + path(), "valid JSON (RFC 8259; " + what + ")");
  }

private:
  struct Level {
    Json* node;      // the open array or object
    std::string key; // objects: the key whose value comes next
  };
  Json& root_;
  std::vector<Level> open_;

  bool fail(const std::string& key, const std::string& expected) {
    error_key = key;
    error_expected = expected;
    return false;
  }
  // The slot of the value being read. Pointers stay valid: a map never moves its nodes, and an
  // array only grows while none of its elements is open.
  Json* place() {
    if (open_.empty())
      return &root_;
    Json* c = open_.back().node;
    if (c->type == Json::Type::Array) {
      c->array.emplace_back();
      return &c->array.back();
    }
    return &c->object[open_.back().key];
  }
  bool open(Json::Type t) {
    Json* j = place();
    j->type = t;
    open_.push_back({j, ""});
    if (open_.size() > kMaxJsonDepth)
      return fail(path(), "at most " + std::to_string(kMaxJsonDepth) + " nested arrays/objects");
    return true;
  }
  // Where the value being read sits, as config.cpp names keys: "workload.distribution.p", "x[2]".
  std::string path() const {
    std::string p;
    for (const Level& l : open_) {
      if (l.node->type == Json::Type::Array)
        p += "[" + std::to_string(l.node->array.empty() ? 0 : l.node->array.size() - 1) + "]";
      else
        p += (p.empty() ? "" : ".") + l.key;
    }
    return p.empty() ? "JSON" : p;
  }
};
} // namespace

std::string Json::scalar_text() const {
  switch (type) {
  case Type::String:
    return string;
  case Type::Bool:
    return boolean ? "1" : "0";
  case Type::Number: {
    if (integral)
      return std::to_string(integer);
    if (std::floor(number) == number && std::fabs(number) < 1e15)
      return std::to_string(static_cast<long long>(number));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", number);
    return buf;
  }
  default:
    return "";
  }
}

Json parse_json(const std::string& text, const std::string& file) {
  Json root;
  TreeBuilder builder(root);
  // strict: the whole text is one value (trailing text is an error); no comments.
  if (!njson::sax_parse(text, &builder, njson::input_format_t::json, /*strict=*/true,
                        /*ignore_comments=*/false))
    throw InputError(file, builder.error_key, builder.error_expected);
  return root;
}

std::string read_input_file(const std::string& path, const std::string& key, const std::string& what,
                            size_t limit) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(path, key,
                     what + " (a regular file; " +
                         (std::filesystem::exists(path, ec) ? "not a directory or a device" : "missing") +
                         ")");
  if (std::filesystem::file_size(path, ec) > limit || ec)
    throw InputError(path, key, what + " of at most " + std::to_string(limit >> 20) + " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(path, key, what + " (readable)");
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > limit) // it grew while read
      throw InputError(path, key, what + " of at most " + std::to_string(limit >> 20) + " MiB");
  }
  return text;
}

Json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(path, "", "a readable JSON file");
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxJsonBytes)
      throw InputError(path, "",
                       "a run description of at most " + std::to_string(kMaxJsonBytes >> 20) + " MiB");
  }
  if (in.bad()) // a directory opens, then fails to read
    throw InputError(path, "", "a readable JSON file");
  return parse_json(text, path);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n')
      out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += c;
  }
  return out;
}

} // namespace numasim
