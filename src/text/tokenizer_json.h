// text/tokenizer_json.h — reading tokenizer.json-style JSON with errors that name the file and the field
// ("tokenizer.json: field 'pre_tokenizer.pretokenizers[1].pattern' must be an object, found string").
//
// Invariants: a JsonField never outlives the json it points into; every accessor that fails throws swift::Error
// naming file and dotted path; optional fields are absent or null alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace swift::text {

class JsonField {
 public:
  JsonField(const nlohmann::json& j, std::string file, std::string path)
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  bool has(const char* key) const { return j_->is_object() && j_->contains(key) && !(*j_)[key].is_null(); }
  JsonField at(const char* key) const {
    if (!j_->is_object()) error(fmt::format("must be an object, found {}", j_->type_name()));
    auto it = j_->find(key);
    if (it == j_->end() || it->is_null()) {
      throw Error(fmt::format("{}: field '{}' is missing", file_, child_path(key)));
    }
    return JsonField(*it, file_, child_path(key));
  }
  std::optional<JsonField> get(const char* key) const {
    if (!has(key)) return std::nullopt;
    return at(key);
  }
  JsonField operator[](size_t i) const {
    return JsonField((*j_)[i], file_, fmt::format("{}[{}]", path_, i));
  }
  size_t size() const {
    if (!j_->is_array() && !j_->is_object()) error(fmt::format("must be an array, found {}", j_->type_name()));
    return j_->size();
  }
  bool is_string() const { return j_->is_string(); }
  bool is_array() const { return j_->is_array(); }
  bool is_object() const { return j_->is_object(); }

  std::string str() const {
    if (!j_->is_string()) error(fmt::format("must be a string, found {}", j_->type_name()));
    return j_->get<std::string>();
  }
  bool boolean() const {
    if (!j_->is_boolean()) error(fmt::format("must be true or false, found {}", j_->type_name()));
    return j_->get<bool>();
  }
  int64_t integer() const {
    if (!j_->is_number_integer()) error(fmt::format("must be an integer, found {}", j_->type_name()));
    return j_->get<int64_t>();
  }
  double number() const {
    if (!j_->is_number()) error(fmt::format("must be a number, found {}", j_->type_name()));
    return j_->get<double>();
  }
  void expect_array() const {
    if (!j_->is_array()) error(fmt::format("must be an array, found {}", j_->type_name()));
  }
  void expect_object() const {
    if (!j_->is_object()) error(fmt::format("must be an object, found {}", j_->type_name()));
  }
  std::string str_or(const char* key, const std::string& fallback) const { return has(key) ? at(key).str() : fallback; }
  bool bool_or(const char* key, bool fallback) const { return has(key) ? at(key).boolean() : fallback; }
  int64_t int_or(const char* key, int64_t fallback) const { return has(key) ? at(key).integer() : fallback; }

  [[noreturn]] void error(const std::string& message) const {
    throw Error(fmt::format("{}: field '{}' {}", file_, path_.empty() ? "(root)" : path_, message));
  }

 private:
  std::string child_path(const char* key) const { return path_.empty() ? std::string(key) : path_ + "." + key; }

  const nlohmann::json* j_;
  std::string file_;
  std::string path_;
};

}  // namespace swift::text
