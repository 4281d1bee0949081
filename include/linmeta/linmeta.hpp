// Umbrella header.
#pragma once

#include "linmeta/builder.hpp"
#include "linmeta/config.hpp"
#include "linmeta/error.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/names.hpp"
#include "linmeta/outputs.hpp"
#include "linmeta/step.hpp"
#include "linmeta/version.hpp"
