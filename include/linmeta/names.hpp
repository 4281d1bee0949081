// The spelling of linmeta's enums in files and on command lines (case files, bench JSON and
// arguments, the Python keyword arguments and properties): one table each, vLLM's spelling
// where vLLM has one.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "linmeta/config.hpp"

namespace linmeta::names {

/// `Config::mamba_cache_mode` as vLLM's `cache_config.mamba_cache_mode` spells it.
inline constexpr std::array<std::pair<CacheMode, std::string_view>, 3> kCacheModes{{
    {CacheMode::None, "none"},
    {CacheMode::All, "all"},
    {CacheMode::Align, "align"},
}};

/// The builder kinds as case files (`"builder"`), the bench and Python name them
/// (LINMETA_BUILDER_KINDS, config.hpp).
inline constexpr std::array<std::pair<BuilderKind, std::string_view>, kNumBuilderKinds>
    kBuilderKinds{{
#define LINMETA_KIND_NAME(K, name, family) {BuilderKind::K, name},
        LINMETA_BUILDER_KINDS(LINMETA_KIND_NAME)
#undef LINMETA_KIND_NAME
    }};

/// `Config::profile` as case files (`config.profile`) and Python (`profile=`) spell it.
inline constexpr std::array<std::pair<Profile, std::string_view>, 2> kProfiles{{
    {Profile::Seed, "seed"},
    {Profile::Vllm034, "vllm-0.34"},
}};

/// `Config::prefill_backend` (case files: `config.prefill_backend`; Python: `prefill_backend=`).
inline constexpr std::array<std::pair<PrefillBackend, std::string_view>, 3> kPrefillBackends{{
    {PrefillBackend::Triton, "triton"},
    {PrefillBackend::FlashInfer, "flashinfer"},
    {PrefillBackend::FlashKda, "flashkda"},
}};

/// The table of an enum type: table_for(CacheMode{}) is kCacheModes.
constexpr const auto& table_for(CacheMode) { return kCacheModes; }
constexpr const auto& table_for(BuilderKind) { return kBuilderKinds; }
constexpr const auto& table_for(Profile) { return kProfiles; }
constexpr const auto& table_for(PrefillBackend) { return kPrefillBackends; }
template <class E>
constexpr const auto& table_of() {
  return table_for(E{});
}

/// The name of `value` in `table`; "?" for a value the table lacks (e.g. a cast integer).
template <class E, size_t N>
constexpr std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table,
                                   E value) {
  for (const auto& [v, n] : table)
    if (v == value) return n;
  return "?";
}

/// The value named `name` in `table`, or nothing when no entry has that exact name.
template <class E, size_t N>
constexpr std::optional<E> parse(const std::array<std::pair<E, std::string_view>, N>& table,
                                 std::string_view name) {
  for (const auto& [v, n] : table)
    if (n == name) return v;
  return std::nullopt;
}

/// "'a', 'b' or 'c'": the accepted names, for error messages.
template <class E, size_t N>
std::string choices(const std::array<std::pair<E, std::string_view>, N>& table) {
  std::string s;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) s += i + 1 == N ? " or " : ", ";
    s.append(1, '\'').append(table[i].second).append(1, '\'');
  }
  return s;
}

constexpr std::string_view cache_mode_name(CacheMode m) { return name_of(kCacheModes, m); }
constexpr std::string_view builder_kind_name(BuilderKind k) { return name_of(kBuilderKinds, k); }
constexpr std::string_view profile_name(Profile p) { return name_of(kProfiles, p); }
constexpr std::string_view prefill_backend_name(PrefillBackend b) {
  return name_of(kPrefillBackends, b);
}

}  // namespace linmeta::names
