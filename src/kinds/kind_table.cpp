// The table of builder kinds: one row per kind of LINMETA_BUILDER_KINDS (config.hpp), the
// row k<Enumerator>Rules defined in its kind's file under src/kinds/ (docs/ARCHITECTURE.md,
// "Adding a builder kind").
#include <array>

#include "kind_rules.hpp"

namespace linmeta::detail {

#define LINMETA_KIND_ROW_DECLARATION(K, name, family) extern const KindRules k##K##Rules;
LINMETA_BUILDER_KINDS(LINMETA_KIND_ROW_DECLARATION)
#undef LINMETA_KIND_ROW_DECLARATION

namespace {

constexpr std::array<const KindRules*, kNumBuilderKinds> kRows{
#define LINMETA_KIND_ROW(K, name, family) &k##K##Rules,
    LINMETA_BUILDER_KINDS(LINMETA_KIND_ROW)
#undef LINMETA_KIND_ROW
};

}  // namespace

const KindRules& kind_rules(BuilderKind kind) { return *kRows[static_cast<size_t>(kind)]; }

}  // namespace linmeta::detail
