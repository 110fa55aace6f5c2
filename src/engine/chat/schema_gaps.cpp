#include "engine/chat/schema_gaps.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "json-schema-to-grammar.h"

namespace prefixd::engine {
namespace {

using json = nlohmann::ordered_json;

// Keywords no grammar holds, whatever the type (the converter reads none of them).
constexpr const char* kNeverHeld[] = {
    "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains",
    "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "multipleOf"};

// A number's bounds: the grammar holds whole-number inclusive ones (patch 0020), and none when a
// bound is exclusive or fractional.
constexpr const char* kNumberBounds[] = {"minimum", "maximum", "exclusiveMinimum",
                                         "exclusiveMaximum"};

bool WholeBound(const json& schema, const char* key) {
  if (!schema.contains(key)) return true;
  const json& v = schema.at(key);
  if (v.is_number_integer()) return true;
  return v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
         std::fabs(v.get<double>()) < 9e15;
}

bool NumberBoundsHeld(const json& schema) {
  if (schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) return false;
  if (!WholeBound(schema, "minimum") || !WholeBound(schema, "maximum")) return false;
  return !(schema.contains("minimum") && schema.contains("maximum") &&
           schema.at("minimum").is_number() && schema.at("maximum").is_number() &&
           schema.at("minimum").get<double>() > schema.at("maximum").get<double>());
}

bool IsType(const json& schema, const char* type) {
  if (!schema.contains("type")) return false;
  const json& t = schema.at("type");
  if (t.is_string()) return t == type;
  if (!t.is_array()) return false;
  for (const json& one : t) {
    if (one == type) return true;
  }
  return false;
}

bool FormatHeld(const std::string& format) {
  return format == "date" || format == "time" || format == "date-time" || format == "uuid" ||
         (format.size() == 5 && format.rfind("uuid", 0) == 0 && format[4] >= '1' &&
          format[4] <= '5');
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// The gaps of one schema node itself (not of the schemas inside it).
void NodeGaps(const json& schema, const std::string& path, std::vector<std::string>* out) {
  const std::string where = path.empty() ? "" : path + ": ";
  for (const char* key : kNeverHeld) {
    if (schema.contains(key)) out->push_back(where + key + " " + schema.at(key).dump());
  }
  if (IsType(schema, "number") && !NumberBoundsHeld(schema)) {
    for (const char* key : kNumberBounds) {
      if (schema.contains(key)) out->push_back(where + "number " + key + " " + schema.at(key).dump());
    }
  }
  if (schema.contains("format") && schema.at("format").is_string() &&
      !FormatHeld(schema.at("format").get<std::string>())) {
    out->push_back(where + "format " + schema.at("format").dump());
  }
  if (schema.contains("pattern") && schema.at("pattern").is_string() &&
      !json_schema_pattern_supported(schema.at("pattern").get<std::string>())) {
    out->push_back(where + "pattern " + schema.at("pattern").dump());
  }
}

void Walk(const json& schema, const std::string& path, int depth, std::vector<std::string>* out) {
  if (!schema.is_object() || depth > 32) return;
  NodeGaps(schema, path, out);
  for (const char* key : {"properties", "$defs", "definitions"}) {
    if (!schema.contains(key) || !schema.at(key).is_object()) continue;
    for (const auto& [name, sub] : schema.at(key).items()) {
      Walk(sub, Join(path, std::string(key) + "." + name), depth + 1, out);
    }
  }
  for (const char* key : {"items", "additionalProperties"}) {
    if (schema.contains(key)) Walk(schema.at(key), Join(path, key), depth + 1, out);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf", "prefixItems", "items"}) {
    if (!schema.contains(key) || !schema.at(key).is_array()) continue;
    const json& list = schema.at(key);
    for (size_t i = 0; i < list.size(); ++i) {
      Walk(list[i], Join(path, std::string(key) + "." + std::to_string(i)), depth + 1, out);
    }
  }
}

}  // namespace

std::vector<std::string> SchemaGaps(std::string_view schema_json) {
  const json schema = json::parse(schema_json, nullptr, false);
  std::vector<std::string> out;
  if (schema.is_discarded()) return out;
  Walk(schema, "", 0, &out);
  return out;
}

std::string SchemaGapsMessage(const std::string& tool, const std::vector<std::string>& gaps) {
  if (gaps.empty()) return "";
  std::string out = "tool '" + tool + "': no grammar holds ";
  for (size_t i = 0; i < gaps.size(); ++i) out += (i == 0 ? "" : "; ") + gaps[i];
  return out + " (a call may break them; the rest of its schema is held)";
}

}  // namespace prefixd::engine
