// Programs, bundles and the node registry.
//
//   p = refgrad.Program.parse(text, "mlp.bwd")   # parse errors: "mlp.bwd:3:7: error: ..."
//   str(p), p.verify(), p.save("mlp.rgbc")
//   b = refgrad.load("mlp.bwd")                  # .bwd (+ .safetensors beside it), .rgbc or a bundle
//   refgrad.nodes(), refgrad.node("MulBackward0").saved
//
// Declarations and instructions are read-only snapshots: a Program is changed
// by writing new text, as the program model is the text's.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "convert.hpp"
#include "refgrad/bundle.hpp"

namespace refgrad::python {

namespace {

std::span<const std::byte> bytes_of(const std::string& data) {
  return {reinterpret_cast<const std::byte*>(data.data()), data.size()};
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  check(out.good(), "cannot open '", path, "' for writing");
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  check(out.good(), "cannot write '", path, "'");
}

// .bwd: the text; .rgbc: the bytecode; .safetensors: a bundle of the program alone.
void save_program(const Program& program, const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".bwd") return write_file(path, print_program(program));
  if (extension == ".rgbc") return write_file(path, write_bytecode(assemble(program)));
  if (extension == ".safetensors") return save_bundle(Bundle{program, {}, {}, {}, {}}, path);
  fail(fmt::format("Program.save: '{}' is not .bwd (text), .rgbc (bytecode) or .safetensors (a bundle)", path));
}

py::object location_or_none(const SourceLocation& where) {
  if (where.line == 0) return py::none();  // not from text
  return py::cast(where);
}

std::string severity_name(Diagnostic::Severity severity) {
  return severity == Diagnostic::Severity::Error ? "error" : "warning";
}

// An attribute as Python sees it: a saved tensor reference as its sigiled
// name ("$x"), everything else as a saved field's value (convert.hpp).
py::object attr_to_python(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        const auto name = [](const SavedRef& ref) { return py::str("$" + ref.name); };
        if constexpr (std::is_same_v<T, SavedRef>) {
          return name(v);
        } else if constexpr (std::is_same_v<T, std::vector<SavedRef>>) {
          py::list list;
          for (const SavedRef& ref : v) list.append(name(ref));
          return list;
        } else if constexpr (std::is_same_v<T, std::vector<std::optional<SavedRef>>>) {
          py::list list;
          for (const std::optional<SavedRef>& ref : v) list.append(ref ? py::object(name(*ref)) : py::none());
          return list;
        } else {
          return field_to_python(FieldValue(v));
        }
      },
      value);
}

// What every declaration class has: a name, a location and a repr.
template <class Decl>
py::class_<Decl> bind_declaration(py::module_& m, const char* name, const char* doc) {
  return py::class_<Decl>(m, name, doc)
      .def_readonly("name", &Decl::name)
      .def_property_readonly("location", [](const Decl& d) { return location_or_none(d.where); })
      .def("__repr__", [name](const Decl& d) { return fmt::format("<{} {}>", name, d.name); });
}

void bind_declarations(py::module_& m) {
  bind_declaration<GradDecl>(m, "GradDecl", "`grad %g : f32[3] [= value]`: an incoming gradient of a root.")
      .def_readonly("type", &GradDecl::type)
      .def_property_readonly("value", [](const GradDecl& d) { return tensor_to_python(d.value); });
  bind_declaration<SavedDecl>(m, "SavedDecl", "`saved $x : f32[3] [= value]`: a tensor saved by the forward.")
      .def_readonly("type", &SavedDecl::type)
      .def_property_readonly("value", [](const SavedDecl& d) { return tensor_to_python(d.value); });
  bind_declaration<LeafDecl>(m, "LeafDecl", "`leaf @w : f32[3] [= grad]`: a tensor whose .grad is accumulated.")
      .def_readonly("type", &LeafDecl::type)
      .def_property_readonly("grad", [](const LeafDecl& d) { return tensor_to_python(d.grad); });
  bind_declaration<HookDecl>(m, "HookDecl", "`hook &name : kind`: a host callable registered by name.")
      .def_property_readonly("kind", [](const HookDecl& d) { return to_string(d.kind); });
  bind_declaration<FunctionDecl>(m, "FunctionDecl", "`function &name`: an autograd.Function's backward.");
  bind_declaration<OutputDecl>(m, "OutputDecl", "`output ^x : f32[3]`: a gradient the program returns.")
      .def_readonly("type", &OutputDecl::type);
}

void bind_instruction(py::module_& m) {
  py::class_<Instr>(m, "Instr", "One instruction of a program (a read-only snapshot).")
      .def_property_readonly("op", [](const Instr& i) { return mnemonic(i.op); })
      .def_readonly("results", &Instr::results)
      .def_readonly("operands", &Instr::operands)
      .def_readonly("node", &Instr::node)
      .def_readonly("target", &Instr::target)
      .def_readonly("leaf", &Instr::leaf)
      .def_readonly("need", &Instr::need)
      .def_readonly("metadata", &Instr::metadata,
                    "validate, zeros: the InputMetadata of each result (None where the text has '_')")
      .def_property_readonly("attrs",
                             [](const Instr& i) {
                               py::dict attrs;  // in schema order
                               for (const Attr& attr : i.attrs) attrs[py::str(attr.name)] = attr_to_python(attr.value);
                               return attrs;
                             })
      .def_readonly("origin", &Instr::origin)
      .def_property_readonly("location", [](const Instr& i) { return location_or_none(i.where); })
      .def_property_readonly("text", &print_instruction)
      .def("__str__", &print_instruction)
      .def("__repr__", [](const Instr& i) { return fmt::format("<Instr {}>", print_instruction(i)); });

  py::class_<Diagnostic>(m, "Diagnostic", "A verifier finding: severity, message, pc and location.")
      .def_property_readonly("severity", [](const Diagnostic& d) { return severity_name(d.severity); })
      .def_readonly("message", &Diagnostic::message)
      .def_property_readonly("pc",
                             [](const Diagnostic& d) -> py::object {
                               if (d.pc < 0) return py::none();
                               return py::int_(d.pc);
                             })
      .def_property_readonly("location", [](const Diagnostic& d) { return location_or_none(d.where); })
      .def("__str__", [](const Diagnostic& d) { return to_string(d); })
      .def("__repr__", [](const Diagnostic& d) { return fmt::format("<Diagnostic {}>", to_string(d)); });
}

void bind_program_class(py::module_& m) {
  py::class_<Program>(m, "Program", "A functionalized backward program (docs/program.md).")
      .def_static("parse", &parse_program, py::arg("text"), py::arg("filename") = "<text>",
                  "Parses the text form; errors read 'file:line:col: error: message'.")
      .def_static(
          "load", [](const std::string& path) { return load_program_file(path).program; }, py::arg("path"),
          "The program of a .bwd, .rgbc or bundle file (refgrad.load keeps its tensors too).")
      .def_static(
          "from_bytecode",
          [](const py::bytes& data, const std::string& origin) {
            return disassemble(read_bytecode(bytes_of(data), origin));
          },
          py::arg("data"), py::arg("origin") = "<bytes>", "A program from .rgbc bytes.")
      .def("to_bytecode", [](const Program& p) { return py::bytes(write_bytecode(assemble(p))); })
      .def("save", &save_program, py::arg("path"), "Writes .bwd (text), .rgbc (bytecode) or .safetensors (bundle).")
      .def(
          "text", [](const Program& p, bool pc) { return print_program(p, PrintOptions{pc}); },
          py::arg("pc") = false, "The canonical text; pc=True numbers the instructions.")
      .def("__str__", [](const Program& p) { return print_program(p); })
      .def("__repr__", [](const Program& p) { return fmt::format("<Program {}: {} instructions>", p.name, p.code.size()); })
      .def("__len__", [](const Program& p) { return p.code.size(); })
      .def(
          "spliced",
          [](const Program& p, std::size_t pc, const Program& region,
             const std::map<std::string, std::optional<std::string>>& renames,
             const std::vector<std::string>& dropped_functions) {
            check(pc < p.code.size(), "Program.spliced: instruction ", pc, " is out of range (", p.code.size(),
                  " instructions)");
            Program out = p;
            out.saved.insert(out.saved.end(), region.saved.begin(), region.saved.end());
            std::erase_if(out.functions, [&](const FunctionDecl& f) {
              return std::find(dropped_functions.begin(), dropped_functions.end(), f.name) != dropped_functions.end();
            });
            out.code.erase(out.code.begin() + static_cast<std::ptrdiff_t>(pc));
            out.code.insert(out.code.begin() + static_cast<std::ptrdiff_t>(pc), region.code.begin(), region.code.end());
            for (std::size_t i = pc + region.code.size(); i < out.code.size(); ++i) {
              for (std::optional<std::string>& operand : out.code[i].operands) {
                if (!operand) continue;
                const auto renamed = renames.find(*operand);
                if (renamed != renames.end()) operand = renamed->second;
              }
            }
            return out;
          },
          py::arg("pc"), py::arg("region"), py::arg("renames") = std::map<std::string, std::optional<std::string>>{},
          py::arg("dropped_functions") = std::vector<std::string>{},
          "A copy with instruction pc replaced by region's instructions (its saved declarations added), "
          "each later operand named in renames read from its new name (None: none), and the functions "
          "named in dropped_functions no longer declared.")
      .def(py::self == py::self)
      .def("verify", &verify, "Checks the program without running it; returns every Diagnostic.")
      .def("check", &check_program, "verify(), raising refgrad.Error with every error; returns the warnings.")
      .def_readwrite("name", &Program::name)
      .def_readonly("grads", &Program::grads)
      .def_readonly("saved", &Program::saved)
      .def_readonly("leaves", &Program::leaves)
      .def_readonly("hooks", &Program::hooks)
      .def_readonly("functions", &Program::functions)
      .def_readonly("outputs", &Program::outputs)
      .def_readonly("code", &Program::code);
}

void bind_bundle(py::module_& m) {
  py::class_<ResultSet>(m, "ResultSet",
                        "What one engine computed: leaf grads by '@name', outputs by '^name', and its values of "
                        "registers by '%name' (refgrad.check keeps them at a divergence; refgrad check does not "
                        "judge them).")
      .def(py::init([](std::string engine, py::handle tensors, std::map<std::string, std::string> config) {
             return ResultSet{std::move(engine), tensor_map_from_python(tensors, "ResultSet.tensors"),
                              std::move(config)};
           }),
           py::arg("engine"), py::arg("tensors") = py::dict(), py::arg("config") = py::dict())
      .def_readonly("engine", &ResultSet::engine)
      .def_property_readonly("tensors", [](const ResultSet& r) { return tensor_map_to_python(r.tensors); })
      .def_readonly("config", &ResultSet::config);

  py::class_<Comparison>(m, "Comparison", "How results are compared (DESIGN.md, Numbers and precision).")
      .def(py::init([](std::string rule, std::string reference, std::optional<double> rtol,
                       std::optional<double> atol) { return Comparison{rule, reference, rtol, atol}; }),
           py::arg("rule") = "reference", py::arg("reference") = "refgrad", py::arg("rtol") = py::none(),
           py::arg("atol") = py::none())
      .def_readwrite("rule", &Comparison::rule)
      .def_readwrite("reference", &Comparison::reference)
      .def_readwrite("rtol", &Comparison::rtol)
      .def_readwrite("atol", &Comparison::atol)
      .def(py::self == py::self);

  // Properties are copies: assign a new dict or list to change one.
  py::class_<Bundle>(m, "Bundle", "A program with its tensors (and results to compare) in one .safetensors file.")
      .def(py::init([](const Program& program, py::handle tensors) {
             return Bundle{program, tensor_map_from_python(tensors, "Bundle.tensors"), {}, {}, {}};
           }),
           py::arg("program"), py::arg("tensors") = py::dict())
      .def_static("load", &load_bundle, py::arg("path"))
      .def_static(
          "from_bytes",
          [](const py::bytes& data, const std::string& origin) { return read_bundle(bytes_of(data), origin); },
          py::arg("data"), py::arg("origin") = "<bytes>")
      .def("to_bytes", [](const Bundle& b) { return py::bytes(write_bundle(b)); })
      .def("save", [](const Bundle& b, const std::string& path) { save_bundle(b, path); }, py::arg("path"))
      .def_readwrite("program", &Bundle::program)
      .def_property(
          "tensors", [](const Bundle& b) { return tensor_map_to_python(b.tensors); },
          [](Bundle& b, py::handle v) { b.tensors = tensor_map_from_python(v, "Bundle.tensors"); })
      .def_readwrite("results", &Bundle::results)
      .def_readwrite("comparison", &Bundle::comparison)
      .def_readwrite("provenance", &Bundle::provenance)
      .def("__repr__", [](const Bundle& b) {
        return fmt::format("<Bundle {}: {} instructions, {} tensors, {} result sets>", b.program.name,
                           b.program.code.size(), b.tensors.size(), b.results.size());
      });

  py::class_<BoundProgram>(m, "BoundProgram", "A program with its saved tensors resolved and bound: what a Machine runs.");

  m.def("load", &load_program_file, py::arg("path"),
        "A program with its tensors: x.safetensors (a bundle), x.rgbc (bytecode) or x.bwd (text, with "
        "x.safetensors beside it when that exists).");
  m.def(
      "make_bundle",
      [](Program program, py::handle values, std::size_t inline_limit) {
        return make_bundle(std::move(program), tensor_map_from_python(values, "make_bundle"), inline_limit);
      },
      py::arg("program"), py::arg("values"), py::arg("inline_limit") = 16,
      "Puts a program and its values (by sigiled name: '$x', '%g', '@w') in a bundle.");
  m.def(
      "bind",
      [](const Bundle& bundle, py::handle tensors) {
        TensorMap all = bundle.tensors;
        for (auto& [name, tensor] : tensor_map_from_python(tensors, "bind")) all[name] = tensor;
        return refgrad::bind(assemble(bundle.program), all);
      },
      py::arg("bundle"), py::arg("tensors") = py::dict(),
      "The bundle's program bound to its tensors and to `tensors` (which take precedence).");
  m.def(
      "bind",
      [](const Program& program, py::handle tensors) {
        return refgrad::bind(assemble(program), tensor_map_from_python(tensors, "bind"));
      },
      py::arg("program"), py::arg("tensors") = py::dict());
  m.def(
      "read_safetensors",
      [](const py::bytes& data, const std::string& origin) {
        std::map<std::string, std::string> metadata;
        TensorMap tensors = read_safetensors(bytes_of(data), origin, &metadata);
        return py::make_tuple(tensor_map_to_python(tensors), metadata);
      },
      py::arg("data"), py::arg("origin") = "<bytes>", "(tensors, metadata) from .safetensors bytes.");
  m.def(
      "write_safetensors",
      [](py::handle tensors, const std::map<std::string, std::string>& metadata) {
        return py::bytes(write_safetensors(tensor_map_from_python(tensors, "write_safetensors"), metadata));
      },
      py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{});
}

void bind_nodes(py::module_& m) {
  py::class_<SavedFieldSchema>(m, "SavedField", "A node's saved field: PyTorch's name and type.")
      .def_readonly("name", &SavedFieldSchema::name)
      .def_property_readonly("type", [](const SavedFieldSchema& f) { return type_name(f.type); })
      .def_property_readonly("kind", [](const SavedFieldSchema& f) { return kind_name(f.type.kind); })
      .def_property_readonly("optional", [](const SavedFieldSchema& f) { return f.type.optional; })
      .def_readonly("exposed", &SavedFieldSchema::exposed)
      .def("__repr__", [](const SavedFieldSchema& f) { return fmt::format("<SavedField {}: {}>", f.name, type_name(f.type)); });

  py::class_<NodeSchema>(m, "NodeSchema", "A backward node: its inputs, incoming grads and saved fields.")
      .def_readonly("name", &NodeSchema::name)
      .def_readonly("aten_op", &NodeSchema::aten_op)
      .def_readonly("inputs", &NodeSchema::inputs)
      .def_property_readonly("num_grads",
                             [](const NodeSchema& s) -> py::object {
                               if (s.num_grads == kVariadic) return py::none();  // one per forward output
                               return py::int_(s.num_grads);
                             })
      .def_readonly("saved", &NodeSchema::saved)
      .def_readonly("formula", &NodeSchema::formula)
      .def("__repr__", [](const NodeSchema& s) { return fmt::format("<NodeSchema {}>", s.name); });

  m.def(
      "nodes",
      [] {
        std::vector<NodeSchema> schemas;
        for (const NodeDef* def : all_nodes()) schemas.push_back(def->schema);
        return schemas;
      },
      "Every node refgrad has, sorted by name.");
  m.def(
      "node", [](const std::string& name) { return get_node(name).schema; }, py::arg("name"),
      "A node's schema; raises refgrad.Error for a node refgrad does not have.");
  py::class_<AtenSchema>(m, "AtenSchema", "An ATen op a program can call: torch's schema, parsed.")
      .def_readonly("name", &AtenSchema::name, "as a program names it: 'aten.mul.Tensor'")
      .def_readonly("text", &AtenSchema::text, "torch's schema, as str(torch.ops.aten.<op>.<overload>._schema)")
      .def_property_readonly("arguments",
                             [](const AtenSchema& s) {
                               py::list arguments;
                               for (const AtenArgument& a : s.arguments) {
                                 arguments.append(py::make_tuple(a.name, type_name(a.type), a.keyword_only));
                               }
                               return arguments;
                             })
      .def_property_readonly("num_results",
                             [](const AtenSchema& s) -> py::object {
                               if (s.num_results == kVariadic) return py::none();  // a Tensor[] result
                               return py::int_(s.num_results);
                             })
      .def("__repr__", [](const AtenSchema& s) { return fmt::format("<AtenSchema {}>", s.name); });
  m.def(
      "aten_ops",
      [] {
        std::vector<AtenSchema> schemas;
        for (const AtenOpDef* op : all_aten_ops()) schemas.push_back(op->schema);
        return schemas;
      },
      "Every ATen op a program can call (an `aten` instruction), sorted by name.");
  m.def(
      "call_aten_op",
      [](const std::string& name, py::sequence arguments) {
        const AtenOpDef& op = get_aten_op(name);
        check(arguments.size() == op.schema.arguments.size(), name, " takes ", op.schema.arguments.size(),
              " arguments, got ", arguments.size());
        std::vector<FieldValue> values;
        for (std::size_t i = 0; i < arguments.size(); ++i) {
          const AtenArgument& argument = op.schema.arguments[i];
          const std::string where = fmt::format("call_aten_op {}: argument '{}'", name, argument.name);
          const py::handle value = arguments[i];
          const bool number = py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) ||
                              py::isinstance<py::float_>(value);
          values.push_back(argument.is_tensor() && number ? field_from_python(value, {FieldKind::Scalar}, where)
                                                          : field_from_python(value, argument.type, where));
        }
        return grads_to_python(call_aten_op(name, values));
      },
      py::arg("name"), py::arg("arguments"),
      "Runs one ATen op on its arguments in schema order (tensors, numbers, lists, dtypes, ...); returns "
      "its results, a list.");

  m.def(
      "call_node",
      [](const std::string& name, py::handle grads, std::vector<bool> need, py::handle saved) {
        const NodeSchema& schema = get_node(name).schema;
        const std::string where = fmt::format("call_node {}", name);
        std::map<std::string, FieldValue> fields;
        for (auto& [field, value] : saved_fields_from_python(saved, schema, false, where)) fields[field] = value;
        return grads_to_python(call_node(name, grads_from_python(grads, where), need, fields));
      },
      py::arg("name"), py::arg("grads"), py::arg("need"), py::arg("saved"),
      "Runs one node: grads (tensor or None per incoming grad), need (one bool per input) and saved "
      "fields by name. Returns one grad (or None) per input.");
}

}  // namespace

void bind_program(py::module_& m) {
  bind_declarations(m);
  bind_instruction(m);
  bind_program_class(m);
  bind_bundle(m);
  bind_nodes(m);
}

}  // namespace refgrad::python
