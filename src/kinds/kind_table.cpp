// The table of builder kinds: one row per kind of LINMETA_BUILDER_KINDS (config.hpp), the
// row k<Enumerator>Rules defined in its kind's file under src/kinds/ (docs/ARCHITECTURE.md,
// "Adding a builder kind").
#include "kind_rules.hpp"

namespace linmeta::detail {

#define LINMETA_KIND_ROW_DECLARATION(K, name, family) extern const KindRules k##K##Rules;
LINMETA_BUILDER_KINDS(LINMETA_KIND_ROW_DECLARATION)
#undef LINMETA_KIND_ROW_DECLARATION

const KindRules* const kKindRows[kNumBuilderKinds]{
#define LINMETA_KIND_ROW(K, name, family) &k##K##Rules,
    LINMETA_BUILDER_KINDS(LINMETA_KIND_ROW)
#undef LINMETA_KIND_ROW
};

}  // namespace linmeta::detail
