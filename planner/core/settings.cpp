// The settings table's rows as data (settings.h).
#include "planner/core/settings.h"

#include <utility>

#include "planner/core/knobs.h"

namespace longctx {
namespace {

std::vector<Setting> build_table() {
  std::vector<Setting> t;
#define LONGCTX_SETTING_ROW(field, Type, member, rule)                                                           \
  t.push_back(Setting{SettingId::field, #field, flag_of(#field), std::string("train.") + rule.key,               \
                      rule.python ? rule.python : #field, Codec<Type>::kind, rule});
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_ROW)
#undef LONGCTX_SETTING_ROW
  return t;
}

// The request's fields that are no row's, and where a plan file holds them.
constexpr std::pair<const char*, const char*> kRequestFields[] = {
    {"--seq", "train.seq"},
    {"--gpus", "cluster.gpus"},
    {"--gpus-per-node", "cluster.gpus_per_node"},
    {"--gpu", "cluster.hardware"},
    {"--budget", "cluster.device_budget_bytes"},
    {"--host-mem", "cluster.host_budget_bytes_per_node"},
    {"--expandable-segments", "cluster.expandable_segments"},
    {"--model", "model"},
};

}  // namespace

const std::vector<Setting>& setting_table() {
  static const std::vector<Setting> table = build_table();
  return table;
}

const Setting& setting(SettingId id) { return setting_table()[static_cast<std::size_t>(id)]; }

KnobValue setting_value(const TrainConfig& t, SettingId id) {
  switch (id) {
#define LONGCTX_SETTING_GET(field, Type, member, rule) \
  case SettingId::field: return Codec<Type>::encode(t.member);
    LONGCTX_SETTING_TABLE(LONGCTX_SETTING_GET)
#undef LONGCTX_SETTING_GET
  }
  return 0;
}

void set_setting(TrainConfig& t, SettingId id, KnobValue v) {
  switch (id) {
#define LONGCTX_SETTING_SET(field, Type, member, rule) \
  case SettingId::field: t.member = Codec<Type>::decode(v); return;
    LONGCTX_SETTING_TABLE(LONGCTX_SETTING_SET)
#undef LONGCTX_SETTING_SET
  }
}

bool holds_setting_value(const TrainConfig& t, SettingId id) {
  switch (id) {
#define LONGCTX_SETTING_HOLDS(field, Type, member, rule) \
  case SettingId::field: return codec_holds(t.member);
    LONGCTX_SETTING_TABLE(LONGCTX_SETTING_HOLDS)
#undef LONGCTX_SETTING_HOLDS
  }
  return false;
}

std::string format_setting(SettingId id, KnobValue v) {
  switch (id) {
#define LONGCTX_SETTING_FORMAT(field, Type, member, rule) \
  case SettingId::field: return Codec<Type>::format(v);
    LONGCTX_SETTING_TABLE(LONGCTX_SETTING_FORMAT)
#undef LONGCTX_SETTING_FORMAT
  }
  return "?";
}

Result<KnobValue> parse_setting(SettingId id, const std::string& text, const std::string& field) {
  switch (id) {
#define LONGCTX_SETTING_PARSE(field_, Type, member, rule) \
  case SettingId::field_: return Codec<Type>::parse(text, field);
    LONGCTX_SETTING_TABLE(LONGCTX_SETTING_PARSE)
#undef LONGCTX_SETTING_PARSE
  }
  return KnobValue{0};
}

std::string plan_key_of_flag(const std::string& flag) {
  for (const Knob& k : knob_table())
    if (k.flag == flag) return k.key();
  for (const Setting& s : setting_table())
    if (s.flag == flag) return s.key;
  for (const auto& [given, key] : kRequestFields)
    if (flag == given) return key;
  return flag;
}

}  // namespace longctx
