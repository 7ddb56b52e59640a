// Strict readers for JSON request bodies: unknown fields and wrong types are errors that
// name the field ("field 'count' must be an integer"), never silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::json_fields {

// `value` must be an object whose keys are all in `allowed`. `what` names it in messages.
Status CheckObject(const nlohmann::json& value, std::initializer_list<const char*> allowed,
                   const std::string& what = "request");

// Absent optional fields leave *out unchanged. Required absent fields are errors.
Status GetString(const nlohmann::json& obj, const char* key, bool required, std::string* out);
Status GetInt(const nlohmann::json& obj, const char* key, bool required, int64_t min, int64_t max, int64_t* out);
Status GetBool(const nlohmann::json& obj, const char* key, bool required, bool* out);

// Parses a request body; InvalidArgument "malformed JSON: ..." otherwise.
Result<nlohmann::json> Parse(const std::string& body);

}  // namespace gpupool::json_fields
