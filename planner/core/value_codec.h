#pragma once
// How each C++ type of the knob and settings tables (knobs.h, settings.h) becomes one integer
// (KnobValue) and text, and back: the tables' rows are read, written, compared and listed
// through these alone.
#include <charconv>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "planner/core/limits.h"
#include "planner/core/parallel_config.h"
#include "planner/core/stack.h"
#include "common/result.h"

namespace longctx {

// A knob's (or setting's) value as one integer, so the search can hold any knob's candidates
// alike: the number itself for counts, 0/1 for switches, the enumerator for words, and for
// checkpointing 0 (none), 1 (full), K (every:K) or kCheckpointOps (op: above every K a model
// may have, so it too needs the `checkpoint` technique).
using KnobValue = std::int64_t;
inline constexpr KnobValue kCheckpointOps = limits::kMaxLayers + 1;

enum class KnobKind { Int, Switch, Text };  // how a value is written: a number, true/false, a word

template <class T>
struct Codec;

// Values written as words, through their type's to_string and parser; the integer is the
// enumerator.
template <class T, Result<T> (*Parse)(const std::string&, const std::string&)>
struct WordCodec {
  static constexpr KnobKind kind = KnobKind::Text;
  static KnobValue encode(T v) { return static_cast<std::int64_t>(v); }
  static T decode(KnobValue v) { return static_cast<T>(v); }
  static std::string format(KnobValue v) { return to_string(Codec<T>::decode(v)); }
  static Result<KnobValue> parse(const std::string& text, const std::string& field) {
    LONGCTX_TRY(auto value, Parse(text, field));
    return Codec<T>::encode(value);
  }
};

template <> struct Codec<Sharding> : WordCodec<Sharding, parse_sharding> {};
template <> struct Codec<RingExchange> : WordCodec<RingExchange, parse_ring_exchange> {};
template <> struct Codec<DType> : WordCodec<DType, parse_dtype> {};
template <> struct Codec<StackKind> : WordCodec<StackKind, parse_stack_kind> {};
template <> struct Codec<HfAttention> : WordCodec<HfAttention, parse_hf_attention> {};
template <> struct Codec<ArcticModel> : WordCodec<ArcticModel, parse_arctic_model> {};
template <> struct Codec<HfCheckpointing> : WordCodec<HfCheckpointing, parse_hf_checkpointing> {};
template <> struct Codec<HfOptimizer> : WordCodec<HfOptimizer, parse_hf_optimizer> {};
template <> struct Codec<HfLoss> : WordCodec<HfLoss, parse_hf_loss> {};
template <> struct Codec<MaxPositions> : WordCodec<MaxPositions, parse_max_positions> {};

// Checkpointing: 0 (none), 1 (full), K (every:K), kCheckpointOps (op); an every:K without a
// K >= 1 (a policy built by hand) is -1, which names no policy.
template <>
struct Codec<CheckpointPolicy> : WordCodec<CheckpointPolicy, parse_checkpoint> {
  static KnobValue encode(const CheckpointPolicy& c) {
    switch (c.kind) {
      case CheckpointPolicy::Kind::None: return 0;
      case CheckpointPolicy::Kind::Full: return 1;
      case CheckpointPolicy::Kind::EveryK: return c.every >= 1 ? c.every : -1;
      case CheckpointPolicy::Kind::Ops: return kCheckpointOps;
    }
    return -1;
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

// int and std::int64_t values. Bounds are the row's, so decoding is exact.
template <class T>
struct IntCodec {
  static constexpr KnobKind kind = KnobKind::Int;
  static KnobValue encode(T v) { return v; }
  static T decode(KnobValue v) { return static_cast<T>(v); }
  static std::string format(KnobValue v) { return std::to_string(v); }
  static Result<KnobValue> parse(const std::string& text, const std::string& field) {
    std::int64_t v = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || ptr != end || text.empty())
      return Error::bad_input(field, fmt::format("'{}' is not a whole number", text));
    return v;
  }
};
template <> struct Codec<int> : IntCodec<int> {};
template <> struct Codec<std::int64_t> : IntCodec<std::int64_t> {};

// Whether x is a value its row can write and read back: an enumerator with a word, a policy
// the plan file can hold.
template <class T>
bool codec_holds(const T& x) {
  const std::int64_t v = Codec<T>::encode(x);
  if (!(Codec<T>::decode(v) == x)) return false;
  if constexpr (Codec<T>::kind != KnobKind::Text) {
    return true;
  } else {
    const auto back = Codec<T>::parse(Codec<T>::format(v), "");
    return back.ok() && *back == v;
  }
}

// "--head-chunk" from "head_chunk".
inline std::string flag_of(const char* name) {
  std::string f = std::string("--") + name;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

}  // namespace longctx
