#include "planner/core/knobs.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/stacks/stack_tiles.h"

#include "planner/core/json_fields.h"

namespace longctx {
namespace {

// How each C++ type of the table becomes a KnobValue and text, and back.
template <class T>
struct Codec;

// Knobs written as words, through their type's to_string and parser.
template <class T, Result<T> (*Parse)(const std::string&, const std::string&)>
struct WordCodec {
  static constexpr KnobKind kind = KnobKind::Text;
  static std::string format(KnobValue v) { return to_string(Codec<T>::decode(v)); }
  static Result<KnobValue> parse(const std::string& text, const std::string& field) {
    LONGCTX_TRY(auto value, Parse(text, field));
    return Codec<T>::encode(value);
  }
};

template <>
struct Codec<Sharding> : WordCodec<Sharding, parse_sharding> {
  static KnobValue encode(Sharding s) { return static_cast<KnobValue>(s); }
  static Sharding decode(KnobValue v) { return static_cast<Sharding>(v); }
};

template <>
struct Codec<RingExchange> : WordCodec<RingExchange, parse_ring_exchange> {
  static KnobValue encode(RingExchange e) { return static_cast<KnobValue>(e); }
  static RingExchange decode(KnobValue v) { return static_cast<RingExchange>(v); }
};

template <>
struct Codec<CheckpointPolicy> : WordCodec<CheckpointPolicy, parse_checkpoint> {
  static KnobValue encode(const CheckpointPolicy& c) {
    switch (c.kind) {
      case CheckpointPolicy::Kind::None: return 0;
      case CheckpointPolicy::Kind::Full: return 1;
      case CheckpointPolicy::Kind::EveryK: return c.every;
      case CheckpointPolicy::Kind::Ops: return kCheckpointOps;
    }
    return 0;
  }
  static CheckpointPolicy decode(KnobValue v) {
    if (v == kCheckpointOps) return CheckpointPolicy::ops();
    return v == 0 ? CheckpointPolicy::none() : CheckpointPolicy::every_k(static_cast<int>(v));
  }
};

template <>
struct Codec<bool> {
  static constexpr KnobKind kind = KnobKind::Switch;
  static KnobValue encode(bool b) { return b ? 1 : 0; }
  static bool decode(KnobValue v) { return v != 0; }
  static std::string format(KnobValue v) { return v ? "true" : "false"; }
  static Result<KnobValue> parse(const std::string& text, const std::string& field) {
    if (text == "true") return 1;
    if (text == "false") return 0;
    return Error::bad_input(field, fmt::format("'{}' is neither true nor false", text));
  }
};

// int and std::int64_t knobs. Bounds are the row's (parse_knob), so decoding is exact.
template <class T>
struct IntCodec {
  static constexpr KnobKind kind = KnobKind::Int;
  static KnobValue encode(T v) { return v; }
  static T decode(KnobValue v) { return static_cast<T>(v); }
  static std::string format(KnobValue v) { return std::to_string(v); }
  static Result<KnobValue> parse(const std::string& text, const std::string& field) {
    KnobValue v = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || ptr != end || text.empty())
      return Error::bad_input(field, fmt::format("'{}' is not a whole number", text));
    return v;
  }
};
template <>
struct Codec<int> : IntCodec<int> {};
template <>
struct Codec<std::int64_t> : IntCodec<std::int64_t> {};

std::string flag_of(const char* name) {
  std::string f = std::string("--") + name;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::vector<Knob> build_table() {
  std::vector<Knob> t;
  const Plan plain;
#define LONGCTX_KNOB_ROW(field, Type, section, rule) \
  t.push_back(Knob{KnobId::field, #field, flag_of(#field), #section, Codec<Type>::kind, rule, Codec<Type>::encode(plain.section.field)});
  LONGCTX_KNOB_TABLE(LONGCTX_KNOB_ROW)
#undef LONGCTX_KNOB_ROW
  return t;
}

bool requirement_met(const Plan& p, const Knob& k) {
  if (!k.rule.needs) return true;
  const Requirement& r = *k.rule.needs;
  const KnobValue other = knob_value(p, r.knob);
  return r.exactly ? other == r.value : other > knob(r.knob).plain;
}

// Tile counts the search tries for n tokens per rank: 1, the powers of two that leave tiles
// of at least the smallest length, and the count that makes tiles of at most the smallest
// length (what max-context uses), capped at the bound on tiles. Tiles may be uneven
// (tile_split), so none needs to divide n.
std::vector<KnobValue> tile_options(std::int64_t n, std::int64_t min_tile, bool allowed) {
  std::vector<KnobValue> out = {1};
  if (!allowed) return out;
  for (std::int64_t t = 2; t <= n / min_tile && t <= limits::kMaxTiles; t *= 2) out.push_back(t);
  const std::int64_t finest = std::min((n + min_tile - 1) / min_tile, limits::kMaxTiles);
  if (finest > out.back()) out.push_back(finest);
  return out;
}

// Head chunks: 0 (off) and every valid chunk, largest (fastest) first.
std::vector<KnobValue> chunk_options(const Plan& p, bool allowed) {
  std::vector<KnobValue> out = {0};
  if (!allowed) return out;
  for (std::int64_t c = p.model.heads / p.parallel.ulysses; c >= 1; --c) {
    ParallelConfig probe;
    probe.ulysses = p.parallel.ulysses;
    probe.ring = p.parallel.ring;
    probe.head_chunk = static_cast<int>(c);
    conform_to_stack(p.model, p.cluster.shape, p.train, probe);
    if (validate(p.model, p.cluster.shape, p.train, probe).ok()) out.push_back(c);
  }
  return out;
}

std::vector<KnobValue> ulysses_options(const Plan& p, const TechniqueSet& allowed) {
  std::vector<KnobValue> out;
  const std::int64_t world = p.cluster.shape.world();
  // A degree divides the query heads too: no need to look past them on a large cluster.
  for (std::int64_t u = 1; u <= std::min<std::int64_t>(world, p.model.heads); ++u) {
    if (world % u != 0 || !technique_allows(allowed, KnobId::ulysses, u)) continue;
    ParallelConfig probe;
    probe.ulysses = static_cast<int>(u);
    TrainConfig t = p.train;
    if (t.seq < 1) t.seq = u;  // only the head rules matter here
    conform_to_stack(p.model, p.cluster.shape, t, probe);
    if (validate(p.model, p.cluster.shape, t, probe).ok()) out.push_back(u);
  }
  return out;
}

// Ring degrees beside the chosen Ulysses degree: 1 (no ring), and every r > 1 with u*r
// dividing the GPUs that the stack can run (validate(), the stack's own knobs conformed).
std::vector<KnobValue> ring_options(const Plan& p, const TechniqueSet& allowed) {
  std::vector<KnobValue> out = {1};
  const std::int64_t world = p.cluster.shape.world(), u = p.parallel.ulysses;
  for (std::int64_t r = 2; u * r <= world; ++r) {
    if (world % (u * r) != 0 || !technique_allows(allowed, KnobId::ring, r)) continue;
    ParallelConfig probe;
    probe.ulysses = static_cast<int>(u);
    probe.ring = static_cast<int>(r);
    TrainConfig t = p.train;
    if (t.seq < 1) t.seq = 2 * u * r;
    conform_to_stack(p.model, p.cluster.shape, t, probe);
    if (validate(p.model, p.cluster.shape, t, probe).ok()) out.push_back(r);
  }
  return out;
}

}  // namespace

const std::vector<Knob>& knob_table() {
  static const std::vector<Knob> table = build_table();
  return table;
}

const Knob& knob(KnobId id) { return knob_table()[static_cast<std::size_t>(id)]; }

KnobValue knob_value(const Plan& p, KnobId id) {
  switch (id) {
#define LONGCTX_KNOB_GET(field, Type, section, rule) \
  case KnobId::field: return Codec<Type>::encode(p.section.field);
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_GET)
#undef LONGCTX_KNOB_GET
  }
  return 0;
}

void set_knob(Plan& p, KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_SET(field, Type, section, rule) \
  case KnobId::field: p.section.field = Codec<Type>::decode(v); return;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_SET)
#undef LONGCTX_KNOB_SET
  }
}

std::optional<KnobValue> fixed_value(const Knobs& k, KnobId id) {
  switch (id) {
#define LONGCTX_KNOB_FIXED(field, Type, section, rule) \
  case KnobId::field: return k.field ? std::optional<KnobValue>(Codec<Type>::encode(*k.field)) : std::nullopt;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FIXED)
#undef LONGCTX_KNOB_FIXED
  }
  return std::nullopt;
}

void fix(Knobs& k, KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_FIX(field, Type, section, rule) \
  case KnobId::field: k.field = Codec<Type>::decode(v); return;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FIX)
#undef LONGCTX_KNOB_FIX
  }
}

std::string format_knob(KnobId id, KnobValue v) {
  switch (id) {
#define LONGCTX_KNOB_FORMAT(field, Type, section, rule) \
  case KnobId::field: return Codec<Type>::format(v);
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_FORMAT)
#undef LONGCTX_KNOB_FORMAT
  }
  return "?";
}

Result<KnobValue> parse_knob(KnobId id, const std::string& text, const std::string& field) {
  Result<KnobValue> v = KnobValue{0};
  switch (id) {
#define LONGCTX_KNOB_PARSE(field_, Type, section, rule) \
  case KnobId::field_: v = Codec<Type>::parse(text, field); break;
    LONGCTX_KNOB_TABLE(LONGCTX_KNOB_PARSE)
#undef LONGCTX_KNOB_PARSE
  }
  if (!v) return v;
  const Knob& k = knob(id);
  if (k.kind == KnobKind::Int && *v < k.rule.min)
    return Error::bad_input(field, fmt::format("must be at least {}, found {}", k.rule.min, *v));
  if (k.kind == KnobKind::Int && *v > k.rule.max)
    return Error::bad_input(field, fmt::format("{} is above longctx's bound of {}", *v, k.rule.max));
  return v;
}

std::string to_string(Technique t) {
  for (const Knob& k : knob_table()) {
    if (k.rule.technique.technique == t) return k.rule.technique.word;
    for (std::size_t v = 0; v < k.rule.technique.by_value.size(); ++v)
      if (k.rule.technique.by_value[v] == t) return format_knob(k.id, static_cast<KnobValue>(v));
  }
  return "?";
}

std::vector<std::string> technique_names(const TechniqueSet& s) {
  std::vector<std::string> out;
  for (int i = 0; i < kTechniques; ++i)
    if (s.test(static_cast<std::size_t>(i))) out.push_back(to_string(static_cast<Technique>(i)));
  return out;
}

TechniqueSet all_techniques() { return TechniqueSet().set(); }

bool has(const TechniqueSet& s, Technique t) { return s.test(static_cast<std::size_t>(t)); }

Result<TechniqueSet> parse_techniques(const std::string& text) {
  if (text == "all") return all_techniques();
  TechniqueSet s;
  if (text == "none") return s;
  // An empty list is a mistake (an unset shell variable), as "," is; "none" says it.
  if (text.empty() || text.find_first_not_of(", ") == std::string::npos)
    return Error::bad_input("--techniques", fmt::format("'{}' names no technique; write none for no technique, all, or a "
                                                        "comma list of: {}",
                                                        text, fmt::join(technique_names(all_techniques()), ",")));
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    bool found = false;
    for (int i = 0; i < kTechniques; ++i)
      if (item == to_string(static_cast<Technique>(i))) {
        s.set(static_cast<std::size_t>(i));
        found = true;
      }
    if (!found)
      return Error::bad_input("--techniques", fmt::format("'{}' is not a technique; known: {}", item,
                                                          fmt::join(technique_names(all_techniques()), ", ")));
  }
  return s;
}

std::optional<Technique> technique_for(KnobId id, KnobValue v) {
  const Knob& k = knob(id);
  const auto& by_value = k.rule.technique.by_value;
  if (v >= 0 && v < static_cast<KnobValue>(by_value.size()) && by_value[static_cast<std::size_t>(v)]) return by_value[static_cast<std::size_t>(v)];
  if (v > k.plain) return k.rule.technique.technique;
  return std::nullopt;
}

bool technique_allows(const TechniqueSet& allowed, KnobId id, KnobValue v) {
  const auto t = technique_for(id, v);
  return !t || has(allowed, *t);
}

Result<bool> check_knobs_allowed(const Knobs& fixed, const TechniqueSet& allowed) {
  for (const Knob& k : knob_table()) {
    const auto v = fixed_value(fixed, k.id);
    if (v && !technique_allows(allowed, k.id, *v))
      return Error::bad_input(k.flag, fmt::format("needs '{}' in --techniques", to_string(*technique_for(k.id, *v))));
  }
  return true;
}

Plan with_knobs(Plan base, const Knobs& fixed) {
  for (const Knob& k : knob_table()) set_knob(base, k.id, fixed_value(fixed, k.id).value_or(k.plain));
  for (const Knob& k : knob_table())
    if (k.rule.needs && knob_value(base, k.id) > k.plain && !fixed_value(fixed, k.rule.needs->knob))
      set_knob(base, k.rule.needs->knob, k.rule.needs->value);
  // The knobs the stack decides (stack_tiles.h), unless fixed otherwise (validate() says why not).
  ParallelConfig conformed = base.parallel;
  conform_to_stack(base.model, base.cluster.shape, base.train, conformed);
  if (!fixed.sharding) base.parallel.sharding = conformed.sharding;
  if (!fixed.loss_tiles) base.parallel.loss_tiles = conformed.loss_tiles;
  if (!fixed.ring_exchange) base.parallel.ring_exchange = conformed.ring_exchange;
  return base;
}

std::int64_t min_tile_tokens(const ModelConfig& m) {
  std::int64_t t = 1;
  while (t * 2 <= std::min<std::int64_t>(1024, m.hidden)) t *= 2;
  return t;
}

std::vector<KnobValue> knob_candidates(KnobId id, const Plan& p, const TechniqueSet& allowed, const Knobs& fixed) {
  if (auto v = fixed_value(fixed, id)) return {*v};
  const Knob& k = knob(id);
  // Whether the row's technique is allowed at all (its values above the plain one).
  const bool any = technique_allows(allowed, id, k.plain + 1);
  switch (k.rule.candidates) {
    case Candidates::Ulysses: return ulysses_options(p, allowed);
    case Candidates::Ring: return ring_options(p, allowed);
    case Candidates::HeadChunk: return chunk_options(p, any);
    case Candidates::Tiles: {
      // A stack that picks its own count offers it (and untiled, where the stack may run so).
      const bool loss = id == KnobId::loss_tiles;
      if (const auto own = stack_tile_count(p.model, p.train, p.parallel.ulysses, loss)) {
        if (loss && stack_always_tiles_loss(p.train)) return {*own};
        if (any && *own > 1) return {1, *own};
        return {1};
      }
      return tile_options(tokens_per_rank(p.train, p.parallel), min_tile_tokens(p.model), any);
    }
    case Candidates::Listed: break;
  }
  std::vector<KnobValue> out;
  const bool met = requirement_met(p, k);
  for (KnobValue v : k.rule.listed)
    if (v == k.plain || (met && technique_allows(allowed, id, v))) out.push_back(v);
  return out;
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

Result<bool> knobs_from_json(const nlohmann::json& in, const std::string& section, Plan& p) {
  using namespace json_fields;
  for (const Knob& k : knob_table()) {
    if (section != k.section) continue;
    // A knob added after plan files were written: such a file ran without it, at its plain value.
    if (k.rule.optional_in_file && !in.contains(k.name)) {
      set_knob(p, k.id, k.plain);
      continue;
    }
    KnobValue v = 0;
    switch (k.kind) {
      case KnobKind::Int: {
        LONGCTX_TRY(v, get_int(in, section, k.name, k.rule.min, k.rule.max));
        break;
      }
      case KnobKind::Switch: {
        LONGCTX_TRY(auto b, get_bool(in, section, k.name));
        v = b ? 1 : 0;
        break;
      }
      case KnobKind::Text: {
        LONGCTX_TRY(auto text, get_string(in, section, k.name));
        LONGCTX_TRY(v, parse_knob(k.id, text, section + "." + k.name));
        break;
      }
    }
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
