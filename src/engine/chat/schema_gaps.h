// What a tool's JSON Schema asks that no grammar holds. A forced or started tool call is written
// under a grammar made from the tool's schema (llama.cpp common's json-schema-to-grammar, and
// patch 0020's raw spelling for the XML-style formats): it holds types, enum and const, required
// and additional properties, string lengths, integer bounds, a number's whole-number inclusive
// bounds, item counts, the patterns the converter can turn into a grammar and the formats date,
// time, date-time and uuid. Any other keyword (a number's exclusive or fractional bounds, format
// "uri", a pattern with a lookahead, uniqueItems, ...) is
// accepted by the grammar without being checked: the call may break it. The server says so
// once per tool and request rather than dropping the schema.
//
// Thread safety: the functions are pure (LogToolSchemaGaps writes through util/log.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace prefixd::engine {

// One line per keyword of `schema_json` (a JSON Schema) that no grammar holds, in schema order,
// each naming where it is and what it asks: `properties.url: format "uri"`. Empty when the
// grammar holds the whole schema, or when `schema_json` is not a JSON object (the template
// render refuses such a tool on its own).
std::vector<std::string> SchemaGaps(std::string_view schema_json);

// The warning for a tool named `tool` whose parameters have the `gaps` above; "" when none.
std::string SchemaGapsMessage(const std::string& tool, const std::vector<std::string>& gaps);

}  // namespace prefixd::engine
