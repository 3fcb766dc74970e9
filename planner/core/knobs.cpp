// The knob table's rows as data: their values in a plan, as text, in the plan file, in
// descriptions, and the rules of one row.
#include "planner/core/knobs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_fields.h"

namespace longctx {
namespace {

std::vector<Knob> build_table() {
  std::vector<Knob> t;
  const Plan plain;
#define LONGCTX_TECHNIQUE(name, word, position) Technique::name,
#define LONGCTX_KNOB_ROW(field, Type, section, techniques, rule)                                                  \
  t.push_back(Knob{KnobId::field, #field, flag_of(#field), #section, Codec<Type>::kind, rule,                    \
                   Codec<Type>::encode(plain.section.field), {LONGCTX_EXPAND_TECHNIQUES techniques}});
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_ROW)
#undef LONGCTX_KNOB_ROW
#undef LONGCTX_TECHNIQUE
  return t;
}

bool requirement_met(const Plan& p, const Requirement& r) {
  const KnobValue other = knob_value(p, r.knob);
  return r.exactly ? other == r.value : other > knob(r.knob).plain;
}

// "needs --sharding zero3: only parameter shards are offloaded".
std::string requirement_text(const Requirement& r) {
  const Knob& other = knob(r.knob);
  const std::string value = r.exactly                         ? format_knob(r.knob, r.value)
                            : other.kind == KnobKind::Int     ? fmt::format("above {}", format_knob(r.knob, other.plain))
                                                              : fmt::format("other than {}", format_knob(r.knob, other.plain));
  return fmt::format("needs {} {}: {}", other.flag, value, r.why);
}

// The row's bounds, for knobs written as numbers.
Result<KnobValue> bounded(const Knob& k, KnobValue v, const std::string& field) {
  if (k.kind == KnobKind::Int && v < k.rule.min)
    return Error::bad_input(field, fmt::format("must be at least {}, found {}", k.rule.min, v));
  if (k.kind == KnobKind::Int && v > k.rule.max)
    return Error::bad_input(field, fmt::format("{} is above longctx's bound of {}", v, k.rule.max));
  return v;
}

}  // namespace

const std::vector<Knob>& knob_table() {
  static const std::vector<Knob> table = build_table();
  return table;
}

const Knob& knob(KnobId id) { return knob_table()[static_cast<std::size_t>(id)]; }

const std::vector<KnobId>& fine_knobs() {
  static const std::vector<KnobId> fine = [] {
    std::vector<KnobId> out;
    for (const Knob& k : knob_table())
      if (k.rule.fine) out.push_back(k.id);
    return out;
  }();
  return fine;
}

KnobValue knob_value(const Plan& p, KnobId id) {
  switch (id) {
#define LONGCTX_KNOB_GET(field, Type, section, techniques, rule) \
  case KnobId::field: return Codec<Type>::encode(p.section.field);
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_GET)
#undef LONGCTX_KNOB_GET
  }
  return 0;
}

void set_knob(Plan& p, KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_SET(field, Type, section, techniques, rule) \
  case KnobId::field: p.section.field = Codec<Type>::decode(v); return;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_SET)
#undef LONGCTX_KNOB_SET
  }
}

std::optional<KnobValue> fixed_value(const Knobs& k, KnobId id) {
  switch (id) {
#define LONGCTX_KNOB_FIXED(field, Type, section, techniques, rule) \
  case KnobId::field: return k.field ? std::optional<KnobValue>(Codec<Type>::encode(*k.field)) : std::nullopt;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FIXED)
#undef LONGCTX_KNOB_FIXED
  }
  return std::nullopt;
}

void fix(Knobs& k, KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_FIX(field, Type, section, techniques, rule) \
  case KnobId::field: k.field = Codec<Type>::decode(v); return;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FIX)
#undef LONGCTX_KNOB_FIX
  }
}

bool holds_knob_value(const Plan& p, KnobId id) {
  switch (id) {
#define LONGCTX_KNOB_HOLDS(field, Type, section, techniques, rule) \
  case KnobId::field: return codec_holds(p.section.field);
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_HOLDS)
#undef LONGCTX_KNOB_HOLDS
  }
  return false;
}

std::string format_knob(KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_FORMAT(field, Type, section, techniques, rule) \
  case KnobId::field: return Codec<Type>::format(v);
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FORMAT)
#undef LONGCTX_KNOB_FORMAT
  }
  return "?";
}

Result<KnobValue> parse_knob(KnobId id, const std::string& text, const std::string& field) {
  Result<KnobValue> v = KnobValue{0};
  switch (id) {
#define LONGCTX_KNOB_PARSE(field_, Type, section, techniques, rule) \
  case KnobId::field_: v = Codec<Type>::parse(text, field); break;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_PARSE)
#undef LONGCTX_KNOB_PARSE
  }
  if (!v) return v;
  return bounded(knob(id), *v, field);
}

Result<bool> check_knob(const Plan& p, KnobId id) {
  const Knob& k = knob(id);
  if (!holds_knob_value(p, id))
    return Error::bad_input(k.flag, fmt::format("holds no value it takes ({})", k.rule.help));
  const KnobValue v = knob_value(p, id);
  LONGCTX_TRY(auto in_bounds, bounded(k, v, k.flag));
  (void)in_bounds;
  if (k.rule.needs && v > k.plain && !requirement_met(p, *k.rule.needs))
    return Error::bad_input(k.flag, requirement_text(*k.rule.needs));
  if (k.rule.check)
    if (Refusal no = k.rule.check(p, v, /*explain=*/true)) return Error::bad_input(k.flag, *no);
  return true;
}

void knobs_to_json(const Plan& p, const std::string& section, nlohmann::json& out) {
  for (const Knob& k : knob_table()) {
    if (section != k.section) continue;
    const KnobValue v = knob_value(p, k.id);
    // At its plain value a knob newer than plan files is left out: the file, its fingerprint
    // (traces, training checkpoints) and those of files written before it stay the same.
    if (k.rule.optional_in_file && v == k.plain) continue;
    switch (k.kind) {
      case KnobKind::Int: out[k.name] = v; break;
      case KnobKind::Switch: out[k.name] = v != 0; break;
      case KnobKind::Text: out[k.name] = format_knob(k.id, v); break;
    }
  }
}

namespace {

Result<KnobValue> knob_from_json(const nlohmann::json& in, const std::string& section, const Knob& k) {
  using namespace json_fields;
  switch (k.kind) {
    case KnobKind::Int: return get_int(in, section, k.name, k.rule.min, k.rule.max);
    case KnobKind::Switch: {
      LONGCTX_TRY(auto b, get_bool(in, section, k.name));
      return b ? 1 : 0;
    }
    case KnobKind::Text: {
      LONGCTX_TRY(auto text, get_string(in, section, k.name));
      return parse_knob(k.id, text, section + "." + k.name);
    }
  }
  return KnobValue{0};
}

}  // namespace

Result<bool> knobs_from_json(const nlohmann::json& in, const std::string& section, Plan& p) {
  for (const Knob& k : knob_table()) {
    if (section != k.section) continue;
    // A knob added after plan files were written: such a file ran without it, at its plain value.
    if (k.rule.optional_in_file && !in.contains(k.name)) {
      set_knob(p, k.id, k.plain);
      continue;
    }
    LONGCTX_TRY(const KnobValue v, knob_from_json(in, section, k));
    set_knob(p, k.id, v);
  }
  return true;
}

std::string describe_knobs(const Plan& p, bool all_rows) {
  std::vector<std::string> parts;
  for (const Knob& k : knob_table()) {
    if (std::string(k.section) != "parallel") continue;
    const KnobValue v = knob_value(p, k.id);
    if (v == k.plain && !all_rows) continue;
    if (k.kind == KnobKind::Switch) {
      if (v) parts.emplace_back(k.rule.label);
    } else if (v == k.plain && k.rule.plain_text) {
      if (*k.rule.plain_text) parts.emplace_back(k.rule.plain_text);  // "": nothing to say
    } else {
      parts.push_back(fmt::format("{} {}", k.rule.label, format_knob(k.id, v)));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace longctx
