// refgrad.Machine: the interpreter, with Python callables as the host.
//
//   m = refgrad.Machine(refgrad.load("mlp.bwd"), hooks={"double": lambda g: g.numpy() * 2})
//   m.run_until(node="AddmmBackward0"); m.register_value("2"); m.step(); m.run()
//   m.leaf_grad("W1")
//
// Hooks are found by the names the program declares (`hook &double :
// tensor_pre`), and called as PyTorch calls its hooks, with None for an
// undefined grad:
//   tensor_pre     hook(grad) -> Tensor | None (unchanged)
//   pre            hook(grad_outputs: list) -> list | None
//   post           hook(grad_inputs: list, grad_outputs: list) -> list | None
//   post_acc_grad  hook(leaf_name: str, grad) -> None (unchanged) | Tensor (the leaf's new .grad)
//                  | refgrad.NO_GRAD (.grad becomes None, as `param.grad = None` in a torch hook)
//   function       backward(saved: list, need: list[bool], grads: list) -> list (or one tensor)
// A hook may return refgrad Tensors, NumPy arrays or torch tensors. A Python
// exception inside one stops the instruction with refgrad.Error (the machine
// stays before it), whose __cause__ is that exception.
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "convert.hpp"
#include "refgrad/bundle.hpp"

namespace refgrad::python {

namespace {

// The type of refgrad.NO_GRAD, the one value a post_acc_grad hook returns to set its leaf's .grad to None.
struct NoGrad {};

// The Python exception a host callable raised during the current call into
// the machine, to become refgrad.Error's __cause__.
struct HostErrors {
  py::object cause;
};

py::object take_exception(py::error_already_set& raised) {
  raised.restore();
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return py::reinterpret_steal<py::object>(value);
}

// Calls a host callable; a Python exception becomes refgrad::Error, so that
// the machine reports it like any failing instruction.
template <class... Args>
py::object call_host(HostErrors& errors, const std::string& who, const py::function& function, Args&&... args) {
  try {
    return function(std::forward<Args>(args)...);
  } catch (py::error_already_set& raised) {
    py::object exception = take_exception(raised);
    const std::string message =
        fmt::format("{} raised {}: {}", who, python_type_name(exception), str_of(exception));
    errors.cause = std::move(exception);
    fail(message);
  }
}

std::optional<Grads> optional_grads(py::handle result, const std::string& who) {
  if (result.is_none()) return std::nullopt;
  return grads_from_python(result, who + " result");
}

py::function callable_from_python(py::handle value, const std::string& who) {
  check(PyCallable_Check(value.ptr()), who, ": expected a callable, got ", python_type_name(value));
  return py::reinterpret_borrow<py::function>(value);
}

void add_hook(Host& host, const HookDecl& decl, py::function fn, const std::shared_ptr<HostErrors>& errors) {
  const std::string who = fmt::format("{} hook &{}", to_string(decl.kind), decl.name);
  switch (decl.kind) {
    case HookKind::TensorPre:
      host.tensor_pre_hooks[decl.name] = [=](const Tensor& grad) -> std::optional<Tensor> {
        const py::object result = call_host(*errors, who, fn, tensor_to_python(grad));
        return optional_tensor_from_python(result, who + " result");
      };
      return;
    case HookKind::Pre:
      host.pre_hooks[decl.name] = [=](const Grads& grad_outputs) {
        return optional_grads(call_host(*errors, who, fn, grads_to_python(grad_outputs)), who);
      };
      return;
    case HookKind::Post:
      host.post_hooks[decl.name] = [=](const Grads& grad_inputs, const Grads& grad_outputs) {
        return optional_grads(call_host(*errors, who, fn, grads_to_python(grad_inputs), grads_to_python(grad_outputs)),
                              who);
      };
      return;
    case HookKind::PostAccGrad:
      host.post_acc_grad_hooks[decl.name] = [=](const std::string& leaf, std::optional<Tensor>& grad) {
        const py::object result = call_host(*errors, who, fn, leaf, tensor_to_python(grad));
        if (py::isinstance<NoGrad>(result)) {
          grad.reset();
        } else if (!result.is_none()) {
          grad = tensor_from_python(result, who + " result");
        }
      };
      return;
  }
}

void add_function(Host& host, const std::string& name, py::function fn, const std::shared_ptr<HostErrors>& errors) {
  const std::string who = fmt::format("function &{}", name);
  host.functions[name] = [=](const std::vector<Tensor>& saved, const Need& need, const Grads& grads) {
    py::list saved_list;
    for (const Tensor& tensor : saved) saved_list.append(tensor_to_python(tensor));
    const py::object result = call_host(*errors, who, fn, saved_list, need, grads_to_python(grads));
    // autograd.Function.backward returns one tensor for a single input.
    if (py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result)) return grads_from_python(result, who);
    return Grads{optional_tensor_from_python(result, who + " result")};
  };
}

std::string declared_names(const std::vector<HookDecl>& hooks) {
  std::vector<std::string> names;
  for (const HookDecl& hook : hooks) names.push_back("&" + hook.name);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

Host host_from_python(const Bytecode& bytecode, py::handle hooks, py::handle functions,
                      const std::shared_ptr<HostErrors>& errors) {
  Host host;
  if (!hooks.is_none()) {
    check(py::isinstance<py::dict>(hooks), "hooks: expected a dict {name: callable}, got ", python_type_name(hooks));
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(hooks)) {
      const std::string name = string_from_python(key, "hooks");
      const auto decl = std::find_if(bytecode.hooks.begin(), bytecode.hooks.end(),
                                     [&](const HookDecl& hook) { return hook.name == name; });
      check(decl != bytecode.hooks.end(), "hooks: the program declares no hook &", name, " (it declares ",
            declared_names(bytecode.hooks), ")");
      add_hook(host, *decl, callable_from_python(value, "hooks['" + name + "']"), errors);
    }
  }
  if (!functions.is_none()) {
    check(py::isinstance<py::dict>(functions), "functions: expected a dict {name: callable}, got ",
          python_type_name(functions));
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(functions)) {
      const std::string name = string_from_python(key, "functions");
      add_function(host, name, callable_from_python(value, "functions['" + name + "']"), errors);
    }
  }
  return host;
}

// A Program (with `tensors`), a Bundle (its tensors, then `tensors`) or a BoundProgram.
BoundProgram bound_from_python(py::handle program, py::handle tensors) {
  TensorMap extra = tensor_map_from_python(tensors, "tensors");
  if (py::isinstance<BoundProgram>(program)) {
    check(extra.empty(), "tensors: a BoundProgram is bound already; pass a Program or a Bundle to bind tensors");
    return program.cast<BoundProgram>();
  }
  if (py::isinstance<Bundle>(program)) {
    const Bundle& bundle = program.cast<const Bundle&>();
    TensorMap all = bundle.tensors;
    for (auto& [name, tensor] : extra) all[name] = tensor;
    return refgrad::bind(assemble(bundle.program), all);
  }
  if (py::isinstance<Program>(program)) return refgrad::bind(assemble(program.cast<const Program&>()), extra);
  fail(fmt::format("expected a Program, Bundle or BoundProgram, got {}", python_type_name(program)));
}

// Runs `work`; a refgrad::Error caused by a Python exception in a host
// callable is raised as refgrad.Error from that exception.
template <class Work>
decltype(auto) with_host_errors(HostErrors& errors, Work&& work) {
  errors.cause = py::object();
  try {
    return work();
  } catch (const Error& error) {
    if (!errors.cause) throw;
    py::object cause = std::move(errors.cause);
    raise_error_from(error.what(), cause);
  }
}

std::string stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::Finished: return "finished";
    case StopReason::Breakpoint: return "breakpoint";
    case StopReason::NonFinite: return "non_finite";
  }
  return "unknown";
}

std::vector<Breakpoint> breakpoints_from_python(py::handle pc, py::handle node, bool non_finite) {
  std::vector<Breakpoint> breakpoints;
  const auto each = [](py::handle value, const auto& add) {
    if (value.is_none()) return;
    if (py::isinstance<py::str>(value) || PyIndex_Check(value.ptr())) return add(value);
    for (py::handle item : sequence_from_python(value, "run_until")) add(item);
  };
  each(pc, [&](py::handle v) {
    const std::int64_t at = int_from_python(v, "run_until: pc");
    check(at >= 0, "run_until: pc must be >= 0, got ", at);
    breakpoints.push_back(Breakpoint::at_pc(static_cast<std::size_t>(at)));
  });
  each(node, [&](py::handle v) { breakpoints.push_back(Breakpoint::at_node(string_from_python(v, "run_until: node"))); });
  if (non_finite) breakpoints.push_back(Breakpoint::non_finite());
  return breakpoints;
}

py::object value_info(const ValueInfo& info) {
  if (!info.defined) return py::none();
  return py::str(to_string(info.type));
}

// The Python-facing machine: the C++ Machine, and a guard against a hook
// that calls back into the machine running it (the machine is mid-instruction
// then, and only reading its state is safe).
class PyMachine {
 public:
  PyMachine(BoundProgram program, py::handle hooks, py::handle functions, MachineOptions options)
      : errors_(std::make_shared<HostErrors>()),
        machine_(make_machine(std::move(program), hooks, functions, options, errors_)) {}

  template <class Work>
  decltype(auto) run(const char* what, Work&& work) {
    check(!busy_, "Machine.", what, ": called from inside one of this machine's hooks or breakpoint callables");
    busy_ = true;
    struct Release {
      bool& busy;
      ~Release() { busy = false; }
    } release{busy_};
    return with_host_errors(*errors_, work);
  }

  Machine& machine() { return machine_; }
  const Machine& machine() const { return machine_; }

 private:
  static Machine make_machine(BoundProgram program, py::handle hooks, py::handle functions, MachineOptions options,
                              const std::shared_ptr<HostErrors>& errors) {
    Host host = host_from_python(program.bytecode, hooks, functions, errors);
    return Machine(std::move(program), std::move(host), options);
  }

  std::shared_ptr<HostErrors> errors_;
  Machine machine_;
  bool busy_ = false;
};

void bind_trace(py::module_& m) {
  py::class_<TraceEntry>(m, "TraceEntry", "One executed instruction: pc, text, operand and result types, time.")
      .def_readonly("pc", &TraceEntry::pc)
      .def_readonly("text", &TraceEntry::text)
      .def_property_readonly("inputs",
                             [](const TraceEntry& e) {
                               py::list list;
                               for (const ValueInfo& info : e.inputs) list.append(value_info(info));
                               return list;
                             })
      .def_property_readonly("outputs",
                             [](const TraceEntry& e) {
                               py::list list;
                               for (const ValueInfo& info : e.outputs) list.append(value_info(info));
                               return list;
                             })
      .def_property_readonly("time_ns", [](const TraceEntry& e) { return e.time.count(); })
      .def("__repr__", [](const TraceEntry& e) { return fmt::format("<TraceEntry {}: {}>", e.pc, e.text); });
}

void bind_machine_class(py::module_& m) {
  using Self = PyMachine;
  py::class_<PyMachine>(m, "Machine",
                        "Runs a program one instruction at a time (include/refgrad/interpreter.hpp).\n"
                        "Registers, leaves and outputs are named without their sigil: register_value('3'), "
                        "leaf_grad('W1'), output('x').")
      .def(py::init([](py::handle program, py::handle tensors, py::handle hooks, py::handle functions,
                       bool keep_values, bool trace, bool check_finite, std::optional<std::size_t> memory_limit,
                       std::optional<RoundingNoise> rounding_noise, std::optional<int> threads) {
             return std::make_unique<PyMachine>(
                 bound_from_python(program, tensors), hooks, functions,
                 MachineOptions{keep_values, trace, check_finite, memory_limit, std::move(rounding_noise), threads});
           }),
           py::arg("program"), py::arg("tensors") = py::none(), py::kw_only(), py::arg("hooks") = py::none(),
           py::arg("functions") = py::none(), py::arg("keep_values") = false, py::arg("trace") = false,
           py::arg("check_finite") = false, py::arg("memory_limit") = py::none(), py::arg("rounding_noise") = py::none(),
           py::arg("threads") = py::none(),
           "program: a Program, a Bundle or a BoundProgram; tensors: values by sigiled name ('$x', '%g', '@w') "
           "bound with a Program or Bundle; hooks: {name: callable} for the program's `hook &name` "
           "declarations; functions: {name: callable} for its `function &name` declarations; keep_values: "
           "keep every register; trace: record a TraceEntry per instruction; check_finite: raise at the first "
           "NaN or Inf; memory_limit: the most bytes one tensor an instruction makes may hold (a larger one "
           "raises refgrad.Error naming the instruction and the shape; None: refgrad.default_memory_limit(), "
           "this machine's memory); rounding_noise: refgrad.rounding_noise_of(program as captured, seed, scale), "
           "the check rule's sensitivity runs (with perturbed_to_float64's program); threads: the threads its kernels "
           "use (None: refgrad.num_threads(); the results are the same bits for any count).")
      .def(
          "set_grad",
          [](Self& s, const std::string& name, py::handle value) {
            const Tensor grad = tensor_from_python(value, "set_grad");
            s.run("set_grad", [&] { s.machine().set_grad(name, grad); });
          },
          py::arg("name"), py::arg("value"))
      .def(
          "set_leaf_grad",
          [](Self& s, const std::string& name, py::handle value) {
            const std::optional<Tensor> grad = optional_tensor_from_python(value, "set_leaf_grad");
            s.run("set_leaf_grad", [&] { s.machine().set_leaf_grad(name, grad); });
          },
          py::arg("name"), py::arg("grad"))
      .def("step", [](Self& s) { s.run("step", [&] { s.machine().step(); }); })
      .def("run", [](Self& s) { s.run("run", [&] { s.machine().run(); }); })
      .def(
          "run_until",
          [](Self& s, py::handle pc, py::handle node, bool non_finite, py::handle stop_before) {
            if (!stop_before.is_none()) {
              check(pc.is_none() && node.is_none() && !non_finite,
                    "run_until: give either breakpoints (pc, node, non_finite) or stop_before, not both");
              const py::function predicate = callable_from_python(stop_before, "run_until: stop_before");
              const py::object self = py::cast(&s, py::return_value_policy::reference);
              return stop_reason_name(s.run("run_until", [&] {
                return s.machine().run_until([&](const Machine&) { return predicate(self).cast<bool>(); });
              }));
            }
            const std::vector<Breakpoint> breakpoints = breakpoints_from_python(pc, node, non_finite);
            return stop_reason_name(s.run("run_until", [&] { return s.machine().run_until(breakpoints); }));
          },
          py::arg("pc") = py::none(), py::arg("node") = py::none(), py::arg("non_finite") = false,
          py::arg("stop_before") = py::none(),
          "Runs to the end or stops before an instruction at `pc` (an int or a list), before a call of `node` "
          "(a name or a list), after a non-finite result (non_finite=True), or before the first instruction "
          "where stop_before(machine) is true. Returns 'finished', 'breakpoint' or 'non_finite'.")
      .def_property_readonly("finished", [](Self& s) { return s.machine().finished(); })
      .def("reset", [](Self& s) { s.run("reset", [&] { s.machine().reset(); }); })
      .def_property_readonly("pc", [](Self& s) { return s.machine().pc(); })
      .def("__len__", [](Self& s) { return s.machine().size(); })
      .def(
          "instruction_text", [](Self& s, std::size_t pc) { return s.machine().instruction_text(pc); },
          py::arg("pc"))
      .def_property_readonly("program", [](Self& s) { return s.machine().program(); })
      .def(
          "register_value", [](Self& s, std::string_view name) { return tensor_to_python(s.machine().register_value(name)); },
          py::arg("name"), "The register's tensor; None when it holds nothing or an undefined tensor (`none`).")
      .def("live_registers", [](Self& s) { return s.machine().live_registers(); },
           "The registers that hold a value now, by name without '%', in definition order (with\n"
           "keep_values=True every register made so far, and the grad declarations).")
      .def(
          "saved_value", [](Self& s, std::string_view name) { return tensor_to_python(s.machine().saved_value(name)); },
          py::arg("name"))
      .def(
          "leaf_grad", [](Self& s, std::string_view name) { return tensor_to_python(s.machine().leaf_grad(name)); },
          py::arg("name"))
      .def(
          "output", [](Self& s, std::string_view name) { return tensor_to_python(s.machine().output(name)); },
          py::arg("name"))
      .def_property_readonly("trace", [](Self& s) { return s.machine().trace(); })
      .def_property_readonly("peak_register_bytes", [](Self& s) { return s.machine().peak_register_bytes(); });
}

}  // namespace

void bind_machine(py::module_& m) {
  py::class_<NoGrad>(m, "_NoGrad", "The type of NO_GRAD.")
      .def("__repr__", [](const NoGrad&) { return "refgrad.NO_GRAD"; });
  m.attr("NO_GRAD") = NoGrad{};
  bind_trace(m);
  bind_machine_class(m);

  m.def(
      "run_program",
      [](py::handle program, py::handle grads, py::handle tensors, py::handle hooks, py::handle functions,
         bool check_finite, std::optional<std::size_t> memory_limit, std::optional<RoundingNoise> rounding_noise,
         std::optional<int> threads) {
        BoundProgram bound = bound_from_python(program, tensors);
        const auto errors = std::make_shared<HostErrors>();
        Host host = host_from_python(bound.bytecode, hooks, functions, errors);
        const TensorMap inputs = tensor_map_from_python(grads, "grads");
        return tensor_map_to_python(with_host_errors(*errors, [&] {
          return run_program(std::move(bound), inputs, std::move(host),
                             MachineOptions{false, false, check_finite, memory_limit, std::move(rounding_noise),
                                            threads});
        }));
      },
      py::arg("program"), py::arg("grads") = py::none(), py::arg("tensors") = py::none(), py::kw_only(),
      py::arg("hooks") = py::none(), py::arg("functions") = py::none(), py::arg("check_finite") = false,
      py::arg("memory_limit") = py::none(), py::arg("rounding_noise") = py::none(), py::arg("threads") = py::none(),
      "Runs a program to the end; returns leaf grads ('@w') and outputs ('^x'). grads by sigiled name ('%g'). "
      "threads: as for Machine.");

  m.def("set_num_threads", &set_num_threads, py::arg("threads"),
        "The threads refgrad's kernels use from now on, BLAS included (0: every core, the default). A Machine's "
        "threads= overrides it for that machine. Results are the same bits for any count: each kernel cuts its "
        "work by its sizes alone and combines partial results in a fixed order.");
  m.def("num_threads", [] { return num_threads(); }, "The threads refgrad's kernels use now (set_num_threads).");
  m.def("default_num_threads", &default_num_threads, "The cores this process may run on: num_threads()'s default.");

  m.def("default_memory_limit", &default_memory_limit,
        "The most bytes one tensor may hold unless a Machine's memory_limit says otherwise: this machine's "
        "physical memory, or its container's limit when lower.");

  m.def("promote_to_float64", py::overload_cast<const Program&>(&promote_to_float64), py::arg("program"),
        "The program in float64: every f32 declaration, metadata and dtype field becomes f64.");
  m.def(
      "promote_to_float64",
      [](const Bundle& bundle) {
        Bundle promoted = bundle;
        promoted.program = promote_to_float64(bundle.program);
        promoted.tensors = promote_to_float64(bundle.tensors);
        return promoted;
      },
      py::arg("bundle"));
  m.def(
      "promote_to_float64",
      [](py::dict tensors) {
        return tensor_map_to_python(promote_to_float64(tensor_map_from_python(tensors, "promote_to_float64")));
      },
      py::arg("tensors"));

  m.def(
      "perturbed_to_float64",
      [](const Bundle& bundle, std::uint64_t seed, double scale, const std::set<std::string>& held) {
        Bundle perturbed = bundle;
        perturbed.program = perturbed_to_float64(bundle.program, seed, scale, held);
        perturbed.tensors = perturbed_to_float64(bundle.tensors, seed, scale, held);
        return perturbed;
      },
      py::arg("bundle"), py::arg("seed") = 0, py::arg("scale") = 1.0, py::arg("held") = std::set<std::string>{},
      "promote_to_float64, with every value the program starts from (saved values, incoming grads, leaves' "
      "grads) moved by up to `scale` roundings of its own dtype, number by number, drawn from seed; the values "
      "`held` names ('$n1_result') are not moved.");
  m.def(
      "saved_values_broken_by_moving",
      [](const PyMachine& exact, const PyMachine& moved) {
        return saved_values_broken_by_moving(exact.machine(), moved.machine());
      },
      py::arg("exact"), py::arg("moved"),
      "The saved values ('$n1_self', ...) of the nodes whose results the finished run `moved` (of "
      "perturbed_to_float64's program) has not finite where `exact` (promote_to_float64's) has them finite, "
      "though none of their operands is; both keep their values. perturbed_to_float64(held=) holds them still.");
  m.def(
      "not_finite_where_finite",
      [](py::handle moved, py::handle exact) {
        return not_finite_where_finite(tensor_from_python(moved, "not_finite_where_finite: moved"),
                                       tensor_from_python(exact, "not_finite_where_finite: exact"));
      },
      py::arg("moved"), py::arg("exact"),
      "Whether `moved` has a NaN or an Inf where `exact` (of its shape) has a finite number.");
  py::class_<RoundingNoise>(m, "RoundingNoise",
                            "Rounding noise for a Machine's sensitivity run (include/refgrad/interpreter.hpp): "
                            "each instruction's results are moved by scale roundings of unit_roundoff[pc], drawn "
                            "from seed.")
      .def_readonly("seed", &RoundingNoise::seed)
      .def_readonly("scale", &RoundingNoise::scale)
      .def_readonly("unit_roundoff", &RoundingNoise::unit_roundoff)
      .def_property_readonly(
          "casts",
          [](const RoundingNoise& noise) {
            std::map<std::size_t, std::vector<std::optional<std::string>>> casts;
            for (const auto& [pc, dtypes] : noise.casts) {
              for (const std::optional<DType>& dtype : dtypes) {
                casts[pc].push_back(dtype ? std::optional(short_dtype_name(*dtype)) : std::nullopt);
              }
            }
            return casts;
          },
          "By pc, the validates that cast grads to a narrower dtype as captured: per result, that dtype ('f16') "
          "or None.")
      .def("__repr__", [](const RoundingNoise& noise) {
        return fmt::format("<refgrad.RoundingNoise seed={} scale={} over {} instructions>", noise.seed, noise.scale,
                           noise.unit_roundoff.size());
      });
  m.def(
      "rounding_noise_of",
      [](py::handle program, std::uint64_t seed, double scale, const std::vector<TraceEntry>& as_captured) {
        if (py::isinstance<Bundle>(program)) {
          return rounding_noise_of(program.cast<const Bundle&>().program, seed, scale, as_captured);
        }
        check(py::isinstance<Program>(program), "rounding_noise_of: expected a Program or a Bundle, got ",
              python_type_name(program));
        return rounding_noise_of(program.cast<const Program&>(), seed, scale, as_captured);
      },
      py::arg("program"), py::arg("seed") = 0, py::arg("scale") = 1.0,
      py::arg("as_captured") = std::vector<TraceEntry>{},
      "The rounding noise of a Program (or a Bundle's) as captured, before promotion: each instruction's unit "
      "roundoff is that of the dtypes it reads or makes. as_captured: the trace of a run of the program as "
      "captured (Machine(..., trace=True).trace), which says which validates cast grads to a narrower dtype: "
      "their results round once more. Run it with perturbed_to_float64's program.");
  m.def(
      "linear_sensitivity",
      [](py::handle exact, py::handle moved, py::handle moved_less, double ratio) {
        return linear_sensitivity(tensor_from_python(exact, "linear_sensitivity: exact"),
                                  tensor_from_python(moved, "linear_sensitivity: moved"),
                                  tensor_from_python(moved_less, "linear_sensitivity: moved_less"), ratio);
      },
      py::arg("exact"), py::arg("moved"), py::arg("moved_less"), py::arg("ratio"),
      "max|moved - exact| over the numbers whose move is linear in the perturbation: moved from "
      "perturbed_to_float64 at scale 1, moved_less at scale 1 / ratio (same seed), exact unperturbed.");
}

}  // namespace refgrad::python
