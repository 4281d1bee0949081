// The table of builder kinds: one row per BuilderKind, each defined in its kind's file
// (docs/ARCHITECTURE.md, "Adding a builder kind").
#include <array>

#include "kind_rules.hpp"

namespace linmeta::detail {

extern const KindRules kGdnRules, kKdaRules, kMamba2Rules, kMamba1Rules, kShortConvRules,
    kLinearRules, kBailingLinearRules, kPleShortConvRules;

namespace {

/// In BuilderKind order (tests/host/kind_table_test.cpp checks it).
constexpr std::array<const KindRules*, kNumBuilderKinds> kRows{
    &kGdnRules,       &kKdaRules,    &kMamba2Rules,        &kMamba1Rules,
    &kShortConvRules, &kLinearRules, &kBailingLinearRules, &kPleShortConvRules};

}  // namespace

const KindRules& kind_rules(BuilderKind kind) { return *kRows[static_cast<size_t>(kind)]; }

}  // namespace linmeta::detail
