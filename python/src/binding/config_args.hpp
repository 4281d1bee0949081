// A builder's configuration from Python keyword arguments and back, through the Config
// field table (linmeta/config.hpp): each field is a keyword of the same name, an int, a
// bool, an enum's name (names.hpp) or, for unsettable fields, None.
#pragma once

#include <nanobind/nanobind.h>

#include "linmeta/config.hpp"

namespace linmeta::py {

namespace nb = nanobind;

/// The defaults of builder kind `kind` (KDA: the FlashKDA prefill backend; the Mamba family:
/// vLLM 0.34's profile) updated from `kwargs`; every keyword named as a Config field is taken
/// out of `kwargs`. TypeError for a wrong type, linmeta.Error for a value out of range or a
/// name that is no enumerator (validate_config checks the rest at construction).
Config config_from_kwargs(BuilderKind kind, nb::dict& kwargs);

/// The configuration as a dict of the same keywords.
nb::dict config_dict(const Config& config);

}  // namespace linmeta::py
