#include "config_args.hpp"

#include <nanobind/stl/string.h>

#include <string>
#include <string_view>

#include "arrays.hpp"
#include "linmeta/names.hpp"
#include "step_inputs.hpp"

namespace linmeta::py {

namespace {

void read(nb::handle v, const char* key, int32_t& out) { out = to_int32(v, key); }

void read(nb::handle v, const char* key, bool& out) { out = to_bool(v, key); }

void read(nb::handle v, const char* key, Unsettable<int32_t> out) {
  out.value = v.is_none() ? 0 : to_int32(v, key);
}

template <class E>
void read(nb::handle v, const char* key, E& out) {
  if (!PyUnicode_Check(v.ptr()))
    throw nb::type_error(
        ("linmeta: " + std::string(key) + " must be one of " + names::choices(names::table_of<E>()))
            .c_str());
  const std::string s = to_string(v, key);
  const auto e = names::parse(names::table_of<E>(), s);
  if (!e)
    raise_error(std::string(key) + " = '" + s + "' must be " +
                names::choices(names::table_of<E>()));
  out = *e;
}

nb::object value(int32_t v) { return nb::int_(v); }
nb::object value(bool v) { return nb::bool_(v); }
nb::object value(Unsettable<const int32_t> v) {
  return v.value > 0 ? nb::object(nb::int_(v.value)) : nb::none();
}
template <class E>
nb::object value(E v) {
  const std::string_view name = names::name_of(names::table_of<E>(), v);
  return nb::str(name.data(), name.size());
}

}  // namespace

Config config_from_kwargs(BuilderKind kind, nb::dict& kwargs) {
  Config c;
  if (kind == BuilderKind::Kda) c.prefill_backend = PrefillBackend::FlashKda;
  if (!is_gdn_family(kind)) c.profile = Profile::Vllm034;
  for_each_config_field(c, [&](const char* key, auto&& member) {
    nb::str k(key);
    if (!kwargs.contains(k)) return;
    nb::object v = kwargs[k];
    PyDict_DelItem(kwargs.ptr(), k.ptr());
    // None: unset where a field can be (vLLM's None), the default backend; else a TypeError.
    if (v.is_none() && std::string_view(key) == "prefill_backend") return;
    read(v, key, member);
  });
  return c;
}

nb::dict config_dict(const Config& config) {
  nb::dict d;
  for_each_config_field(config,
                        [&](const char* key, const auto& member) { d[key] = value(member); });
  return d;
}

}  // namespace linmeta::py
