// A minimal streaming JSON writer (objects, arrays, strings, numbers, null).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace linmeta::bench {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  /// The next value's key (inside an object).
  JsonWriter& key(std::string_view k) {
    separate();
    quote(k);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(std::string_view s) {
    separate();
    quote(s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { return raw(b ? "true" : "false"); }
  JsonWriter& value(int32_t v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(int64_t v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(uint64_t v) { return raw(fmt::format("{}", v)); }
  /// Non-finite numbers are written as null.
  JsonWriter& value(double v) { return std::isfinite(v) ? raw(fmt::format("{:.4f}", v)) : null(); }
  JsonWriter& null() { return raw("null"); }

  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  [[nodiscard]] const std::string& str() const { return out_; }

 private:
  JsonWriter& open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
    return *this;
  }
  JsonWriter& raw(std::string_view s) {
    separate();
    out_ += s;
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (c < 0x20) {
        out_ += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        out_ += ch;
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace linmeta::bench
