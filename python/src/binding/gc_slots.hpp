// The garbage collector's slots of a nanobind class whose C++ object holds Python references
// (a cycle through it is otherwise invisible to the collector and never freed):
// nb::class_<T>(m, "T", nb::type_slots(GcSlots<T>::slots)), with T::traverse(visit, arg)
// visiting every reference held and T::clear() dropping those a cycle may run through.
#pragma once

#include <nanobind/nanobind.h>

namespace linmeta::py {

template <class T>
struct GcSlots {
  static int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));                    // a heap type's instances reference it
    if (!nanobind::inst_ready(self)) return 0;  // before or during __init__
    return nanobind::inst_ptr<T>(self)->traverse(visit, arg);
  }
  static int clear(PyObject* self) {
    if (nanobind::inst_ready(self)) nanobind::inst_ptr<T>(self)->clear();
    return 0;
  }
  static inline PyType_Slot slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&traverse)},
                                       {Py_tp_clear, reinterpret_cast<void*>(&clear)},
                                       {0, nullptr}};
};

}  // namespace linmeta::py
