#include "json.hpp"
#include "error.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace numasim {

namespace {
class Parser {
public:
  Parser(const std::string& text, const std::string& file) : s_(text), file_(file) {}

  Json parse_document()
  {
    Json v = value();
    skip_ws();
    if (pos_ != s_.size())
      fail("end of document");
    return v;
  }

private:
  const std::string& s_;
  const std::string& file_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const
  {
    throw InputError(file_, "JSON at byte " + std::to_string(pos_), what);
  }
  void skip_ws()
  {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      pos_++;
  }
  bool consume(const char* word)
  {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }
  Json value()
  {
    skip_ws();
    if (pos_ >= s_.size())
      fail("a value");
    Json v;
    char c = s_[pos_];
    if (c == '{') {
      v.type = Json::Type::Object;
      pos_++;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        pos_++;
        return v;
      }
      while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"')
          fail("a string key");
        std::string key = string_literal();
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':')
          fail("':'");
        pos_++;
        v.object[key] = value();
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          pos_++;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          pos_++;
          return v;
        }
        fail("',' or '}'");
      }
    }
    if (c == '[') {
      v.type = Json::Type::Array;
      pos_++;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        pos_++;
        return v;
      }
      while (true) {
        v.array.push_back(value());
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          pos_++;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          pos_++;
          return v;
        }
        fail("',' or ']'");
      }
    }
    if (c == '"') {
      v.type = Json::Type::String;
      v.string = string_literal();
      return v;
    }
    if (consume("true")) {
      v.type = Json::Type::Bool;
      v.boolean = true;
      return v;
    }
    if (consume("false")) {
      v.type = Json::Type::Bool;
      return v;
    }
    if (consume("null"))
      return v;
    // number
    const char* start = s_.c_str() + pos_;
    char* end = nullptr;
    double d = std::strtod(start, &end);
    if (end == start)
      fail("a value");
    v.type = Json::Type::Number;
    v.number = d;
    pos_ += end - start;
    return v;
  }
  std::string string_literal()
  {
    pos_++; // opening quote
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size())
          fail("an escape");
        char e = s_[pos_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (pos_ + 4 > s_.size())
              fail("4 hex digits");
            unsigned code = std::stoul(s_.substr(pos_, 4), nullptr, 16);
            pos_ += 4;
            if (code < 0x80)
              out += char(code);
            else if (code < 0x800) {
              out += char(0xC0 | (code >> 6));
              out += char(0x80 | (code & 0x3F));
            } else {
              out += char(0xE0 | (code >> 12));
              out += char(0x80 | ((code >> 6) & 0x3F));
              out += char(0x80 | (code & 0x3F));
            }
            break;
          }
          default: out += e;
        }
      } else
        out += c;
    }
    if (pos_ >= s_.size())
      fail("closing '\"'");
    pos_++;
    return out;
  }
};
} // namespace

std::string Json::scalar_text() const
{
  switch (type) {
    case Type::String: return string;
    case Type::Bool: return boolean ? "1" : "0";
    case Type::Number: {
      if (std::floor(number) == number && std::fabs(number) < 1e15)
        return std::to_string(static_cast<long long>(number));
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", number);
      return buf;
    }
    default: return "";
  }
}

Json parse_json(const std::string& text, const std::string& file) { return Parser(text, file).parse_document(); }

Json load_json_file(const std::string& path)
{
  std::ifstream in(path);
  if (!in)
    throw InputError(path, "", "a readable JSON file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), path);
}

std::string json_escape(const std::string& s)
{
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
