#include "common/json_fields.h"

namespace gpupool::json_fields {

Status CheckObject(const nlohmann::json& value, std::initializer_list<const char*> allowed, const std::string& what) {
  if (!value.is_object()) return Status::InvalidArgument(what + " must be a JSON object");
  for (auto it = value.begin(); it != value.end(); ++it) {
    bool known = false;
    for (const char* k : allowed) known = known || it.key() == k;
    if (!known) {
      std::string list;
      for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
      return Status::InvalidArgument("unknown field '" + it.key() + "' in " + what + " (expected: " + list + ")");
    }
  }
  return Status::OK();
}

Status GetString(const nlohmann::json& obj, const char* key, bool required, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? Status::InvalidArgument(std::string("missing field '") + key + "'") : Status::OK();
  }
  if (!it->is_string()) return Status::InvalidArgument(std::string("field '") + key + "' must be a string");
  *out = it->get<std::string>();
  return Status::OK();
}

Status GetInt(const nlohmann::json& obj, const char* key, bool required, int64_t min, int64_t max, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? Status::InvalidArgument(std::string("missing field '") + key + "'") : Status::OK();
  }
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(std::string("field '") + key + "' must be an integer");
  }
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                                 : it->get<int64_t>();
  if (v < min || v > max) {
    return Status::InvalidArgument(std::string("field '") + key + "' must be between " + std::to_string(min) + " and " +
                                   std::to_string(max) + ", not " + std::to_string(v));
  }
  *out = v;
  return Status::OK();
}

Status GetBool(const nlohmann::json& obj, const char* key, bool required, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? Status::InvalidArgument(std::string("missing field '") + key + "'") : Status::OK();
  }
  if (!it->is_boolean()) return Status::InvalidArgument(std::string("field '") + key + "' must be true or false");
  *out = it->get<bool>();
  return Status::OK();
}

Result<nlohmann::json> Parse(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("malformed JSON in request body");
  return j;
}

}  // namespace gpupool::json_fields
