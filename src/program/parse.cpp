// The parser: text to Program by recursive descent over the lexer's tokens
// (docs/program.md "Text syntax"). It checks the syntax and what reading the
// text needs — a node's schema says how to read its fields, a declaration's
// type how to read its tensor literal — and leaves every other rule (counts,
// names declared, types) to verify().
//
// Hostile text must give an Error, never a crash: numbers are range-checked,
// brackets nest at most text::kMaxNesting deep (the lexer counts them, so the
// one recursion here, into tensor literals, is bounded), and nothing is
// allocated from a declared size, only from what the text lists.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <complex>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "text.hpp"

namespace refgrad {

namespace {

using text::Token;
using text::TokenKind;

// A part of a {key=value, ...} record (TensorOptions, TensorGeometry, TypeAndSize, edge metadata).
struct RecordKey {
  std::string_view name;
  bool required = false;
  bool flag = false;  // written without "=value" (`subclass`)
};

bool has_need(Opcode op) { return op == Opcode::Call || op == Opcode::CopySlices || op == Opcode::CallBackward; }

std::string sigil_noun(TokenKind kind) {
  switch (kind) {
    case TokenKind::Register: return "a register '%NAME'";
    case TokenKind::Saved: return "a saved tensor '$NAME'";
    case TokenKind::Leaf: return "a leaf '@NAME'";
    case TokenKind::Callable: return "a host callable '&NAME'";
    default: return "an output '^NAME'";
  }
}

// What a field of each kind looks like, for "expected ..." messages.
std::string value_noun(FieldKind kind) {
  switch (kind) {
    case FieldKind::Tensor: return "a saved tensor '$NAME' or none";
    case FieldKind::TensorList: return "a list of saved tensors [$a, ...]";
    case FieldKind::OptionalTensorList: return "a list of saved tensors or none [$a, none, ...]";
    case FieldKind::Int: return "an integer";
    case FieldKind::IntList:
    case FieldKind::Sizes: return "a list of integers [...]";
    case FieldKind::Float: return "a number";
    case FieldKind::Bool: return "true or false";
    case FieldKind::Scalar: return "a number (2, 2.0 or 1.0-2.0j), true or false";
    case FieldKind::String: return "a string";
    case FieldKind::DType: return "a dtype";
    case FieldKind::Layout: return "a layout";
    case FieldKind::TensorOptions: return "TensorOptions {...}";
    case FieldKind::TensorGeometry: return "a TensorGeometry {sizes=..., strides=..., storage_offset=...}";
    case FieldKind::TypeAndSize: return "a TypeAndSize {sizes=..., options=...}";
    case FieldKind::DTypeList: return "a list of dtypes [...]";
    case FieldKind::SizesList: return "a list of integer lists [[...], ...]";
    case FieldKind::BoolList: return "a list of true and false [...]";
    case FieldKind::Device: return "a device (cpu, cuda)";
    case FieldKind::MemoryFormat: return "a memory format (contiguous_format, preserve_format, channels_last, ...)";
  }
  return "a value";
}

bool is_float_word(const Token& token) {
  return token.kind == TokenKind::Word && (token.text == "nan" || token.text == "inf");
}

bool is_number(const Token& token) {
  return token.kind == TokenKind::Integer || token.kind == TokenKind::Float || is_float_word(token);
}

// An imaginary part: 2j, -0.5j, +infj, and the bare words infj and nanj.
bool is_imaginary(const Token& token) {
  return token.kind == TokenKind::Imaginary ||
         (token.kind == TokenKind::Word && (token.text == "infj" || token.text == "nanj"));
}

bool is_bool(const Token& token) {
  return token.kind == TokenKind::Word && (token.text == "true" || token.text == "false");
}

// Whether `token` can begin a value of `kind` (the reader then checks the rest).
bool starts_value(FieldKind kind, const Token& token) {
  auto symbol = [&token](char c) { return token.kind == TokenKind::Symbol && token.text[0] == c; };
  switch (kind) {
    case FieldKind::Tensor: return token.kind == TokenKind::Saved;
    case FieldKind::Int: return token.kind == TokenKind::Integer;
    case FieldKind::Float: return is_number(token);
    case FieldKind::Bool: return is_bool(token);
    case FieldKind::Scalar: return is_number(token) || is_imaginary(token) || is_bool(token);
    case FieldKind::String: return token.kind == TokenKind::String;
    case FieldKind::DType:
    case FieldKind::Layout:
    case FieldKind::Device:
    case FieldKind::MemoryFormat: return token.kind == TokenKind::Word;
    case FieldKind::TensorOptions:
    case FieldKind::TensorGeometry:
    case FieldKind::TypeAndSize: return symbol('{');
    default: return symbol('[');  // the lists
  }
}

// "element", "elements".
std::string plural(std::int64_t count, const std::string& noun) { return count == 1 ? noun : noun + "s"; }

// With a zero dimension a literal ("[]") matches sizes whose product
// overflows (f32[0,1e18,1e18]); such a tensor's strides cannot be computed.
bool strides_fit(const Shape& sizes) {
  std::int64_t stride = 1;
  for (std::int64_t size : sizes) {
    if (__builtin_mul_overflow(stride, std::max<std::int64_t>(size, 1), &stride)) return false;
  }
  return true;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : source_(text, file), lexer_(source_) {
    token_ = lexer_.next();
  }
  Program parse();

 private:
  // ------------------------------------------------------------ tokens ---
  Token take() {
    Token taken = std::move(token_);
    token_ = lexer_.next();
    return taken;
  }
  bool at(TokenKind kind) const { return token_.kind == kind; }
  bool at_symbol(char c) const { return at(TokenKind::Symbol) && token_.text[0] == c; }
  bool at_word(std::string_view word) const { return at(TokenKind::Word) && token_.text == word; }
  bool at_line_end() const { return at(TokenKind::Newline) || at(TokenKind::End); }
  bool accept_symbol(char c) {
    if (!at_symbol(c)) return false;
    take();
    return true;
  }
  [[noreturn]] void fail(const Token& token, const std::string& message) const {
    source_.fail(token.where, message);
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail(token_, "expected " + what + ", got " + text::describe(token_));
  }
  Token expect(TokenKind kind, const std::string& what) {
    if (!at(kind)) fail_expected(what);
    return take();
  }
  void expect_symbol(char c, const std::string& where) {
    if (!accept_symbol(c)) fail_expected(fmt::format("'{}' {}", c, where));
  }
  void expect_line_end(const std::string& after) {
    if (!at_line_end()) fail(token_, "unexpected " + text::describe(token_) + " " + after);
    if (at(TokenKind::Newline)) take();
  }
  void skip_blank_lines() {
    while (at(TokenKind::Newline)) take();
  }
  SourceLocation location(const Token& token) const {
    return SourceLocation{source_.file(), token.where.line, token.where.column};
  }

  // ----------------------------------------------------------- program ---
  void parse_declaration(Program& program);
  std::optional<Tensor> read_initial_value(const TensorType& type);
  Instr parse_instruction(std::size_t pc);
  void check_instruction_number(std::size_t pc);
  const NodeSchema* parse_body(const Token& opcode, Instr& instr);
  const NodeSchema& node_schema(const Token& name) const;
  void parse_keywords(Instr& instr, const NodeSchema* schema);
  std::optional<FieldType> keyword_type(const Instr& instr, const NodeSchema* schema, const std::string& key) const;
  std::string unknown_keyword(const Instr& instr, const std::string& key) const;

  // ------------------------------------------------------------ values ---
  std::string read_name(TokenKind sigil) { return expect(sigil, sigil_noun(sigil)).text; }
  std::vector<std::optional<std::string>> read_results();
  std::vector<std::optional<std::string>> read_operands();
  std::int64_t read_integer();
  template <class Float>
  Float read_float(DType dtype);
  template <class Float>
  Float float_of(const Token& token, const std::string& spelling, DType dtype);
  template <class Float>
  Float read_imaginary(DType dtype);
  bool read_bool();
  Scalar read_scalar();
  DType read_dtype();
  Device read_device();
  Layout read_layout();
  Shape read_sizes();
  IntList read_int_list();
  std::vector<bool> read_need();
  TensorType read_type();
  std::optional<InputMetadata> read_metadata();
  std::vector<std::optional<InputMetadata>> read_metadata_list();
  TensorOptions read_options();
  TensorGeometry read_geometry();
  TypeAndSize read_type_and_size();
  AttrValue read_value(FieldType type, const std::string& field);
  void parse_aten_arguments(const Token& name, Instr& instr);
  // One argument of an aten instruction as read: the operands it reads and its attribute's value.
  struct AtenArgumentText {
    std::vector<std::optional<std::string>> operands;
    AttrValue value = None{};
  };
  AtenArgumentText read_aten_argument(const AtenArgument& argument);
  std::optional<std::string> read_tensor_operand(const AtenArgument& argument, bool none_allowed);
  template <class ReadItem>
  void read_list(ReadItem read_item);
  template <class ReadPart>
  void read_record(std::string_view what, const std::vector<RecordKey>& keys, ReadPart read_part);

  // ---------------------------------------------------- tensor literals ---
  Tensor read_literal(const TensorType& type);
  template <class T>
  Tensor read_literal_as(const TensorType& type);
  template <class T>
  T read_element(const TensorType& type);
  template <class ReadElement>
  void read_literal_block(const TensorType& type, std::size_t dim, ReadElement& read_element);

  text::Source source_;
  text::Lexer lexer_;
  Token token_;  // the next token, not yet taken
};

// ------------------------------------------------------------- structure ---

Program Parser::parse() {
  Program program;
  skip_blank_lines();
  if (at(TokenKind::End)) fail(token_, "the text is empty: expected 'program NAME'");
  if (!at_word("program")) fail_expected("'program NAME'");
  take();
  program.name = expect(TokenKind::Word, "the program's name").text;
  expect_line_end("after the program's name");
  while (true) {
    skip_blank_lines();
    if (at(TokenKind::End)) {
      fail(token_, "missing 'code': the declarations end with a line 'code', then the instructions");
    }
    if (at_word("code")) break;
    parse_declaration(program);
  }
  take();
  expect_line_end("after 'code'");
  for (skip_blank_lines(); !at(TokenKind::End); skip_blank_lines()) {
    program.code.push_back(parse_instruction(program.code.size()));
  }
  return program;
}

void Parser::parse_declaration(Program& program) {
  if (!at(TokenKind::Word)) fail_expected("a declaration (grad, saved, leaf, hook, function, output) or 'code'");
  const Token keyword = take();
  const SourceLocation where = location(keyword);
  auto read_type_after_colon = [this] {
    expect_symbol(':', "before the type");
    return read_type();
  };
  if (keyword.text == "grad") {
    GradDecl grad{read_name(TokenKind::Register), read_type_after_colon(), std::nullopt, where};
    grad.value = read_initial_value(grad.type);
    program.grads.push_back(std::move(grad));
  } else if (keyword.text == "saved") {
    SavedDecl saved{read_name(TokenKind::Saved), read_type_after_colon(), std::nullopt, where};
    saved.value = read_initial_value(saved.type);
    program.saved.push_back(std::move(saved));
  } else if (keyword.text == "leaf") {
    LeafDecl leaf{read_name(TokenKind::Leaf), read_type_after_colon(), std::nullopt, where};
    leaf.grad = read_initial_value(leaf.type);
    program.leaves.push_back(std::move(leaf));
  } else if (keyword.text == "hook") {
    HookDecl hook{read_name(TokenKind::Callable), HookKind::TensorPre, where};
    expect_symbol(':', "before the hook's kind");
    const Token kind = expect(TokenKind::Word, "a hook kind (tensor_pre, pre, post, post_acc_grad)");
    const std::optional<HookKind> parsed = parse_hook_kind(kind.text);
    if (!parsed) fail(kind, "unknown hook kind '" + kind.text + "' (tensor_pre, pre, post or post_acc_grad)");
    hook.kind = *parsed;
    program.hooks.push_back(std::move(hook));
  } else if (keyword.text == "function") {
    program.functions.push_back(FunctionDecl{read_name(TokenKind::Callable), where});
  } else if (keyword.text == "output") {
    OutputDecl output{read_name(TokenKind::Output), TensorType{}, where};
    output.type = read_type_after_colon();
    program.outputs.push_back(std::move(output));
  } else {
    fail(keyword, "unknown declaration '" + keyword.text +
                      "' (grad, saved, leaf, hook, function or output; instructions come after 'code')");
  }
  expect_line_end("after the declaration");
}

std::optional<Tensor> Parser::read_initial_value(const TensorType& type) {
  if (!accept_symbol('=')) return std::nullopt;
  return read_literal(type);
}

// [N] [RESULTS =] OPCODE BODY [KEYWORDS]
Instr Parser::parse_instruction(std::size_t pc) {
  if (at(TokenKind::Integer)) check_instruction_number(pc);
  Instr instr;
  instr.where = location(token_);
  if (at(TokenKind::Register) || at_word("_")) {
    instr.results = read_results();
    expect_symbol('=', "after the results");
  }
  const Token opcode = expect(TokenKind::Word, "an instruction (a node name, validate, add, zeros, ...)");
  const NodeSchema* schema = parse_body(opcode, instr);
  parse_keywords(instr, schema);
  return instr;
}

void Parser::check_instruction_number(std::size_t pc) {
  const Token number = token_;
  if (read_integer() != static_cast<std::int64_t>(pc)) {
    fail(number, fmt::format("instruction number {} does not match its position {}", number.text, pc));
  }
}

// The opcode's own syntax, up to its keywords. Returns the node's schema for
// a call and a CopySlices, nullptr for the others.
const NodeSchema* Parser::parse_body(const Token& opcode, Instr& instr) {
  const std::string& word = opcode.text;
  if (word == "validate") {
    instr.op = Opcode::Validate;
    instr.operands = read_operands();
    expect_symbol(':', "before the edges' metadata");
    instr.metadata = read_metadata_list();
  } else if (word == "add") {
    instr.op = Opcode::Add;
    instr.operands = read_operands();
  } else if (word == "zeros") {
    instr.op = Opcode::Zeros;
    expect_symbol(':', "before the zeros' type");
    instr.metadata = {read_metadata()};
  } else if (word == "accumulate_grad") {
    instr.op = Opcode::AccumulateGrad;
    instr.target = read_name(TokenKind::Leaf);
    instr.operands = read_operands();
  } else if (word == "hook") {
    instr.op = Opcode::Hook;
    instr.target = read_name(TokenKind::Callable);
    // A post-accumulate-grad hook takes its leaf; the others take grads.
    if (at(TokenKind::Leaf)) instr.leaf = take().text;
    else instr.operands = read_operands();
  } else if (word == "call_backward") {
    instr.op = Opcode::CallBackward;
    instr.target = read_name(TokenKind::Callable);
    instr.operands = read_operands();
  } else if (word == "output") {
    instr.op = Opcode::Output;
    instr.target = read_name(TokenKind::Output);
    instr.operands = read_operands();
  } else if (word == "CopySlices") {
    instr.op = Opcode::CopySlices;
    expect_symbol('[', "after CopySlices (CopySlices[NODE])");
    const Token node = expect(TokenKind::Word, "a node name");
    instr.node = node.text;
    const NodeSchema* schema = &node_schema(node);
    expect_symbol(']', "after CopySlices' node");
    instr.operands = read_operands();
    return schema;
  } else if (word.starts_with("aten.") || word.starts_with("prims.")) {
    instr.op = Opcode::Aten;
    instr.node = word;
    parse_aten_arguments(opcode, instr);
  } else if (word == "grad" || word == "saved" || word == "leaf" || word == "function") {
    fail(opcode, "a declaration ('" + word + "') after 'code': declarations come before 'code'");
  } else {
    instr.op = Opcode::Call;
    instr.node = word;
    const NodeSchema* schema = &node_schema(opcode);
    instr.operands = read_operands();
    return schema;
  }
  return nullptr;
}

const NodeSchema& Parser::node_schema(const Token& name) const {
  const NodeDef* node = find_node(name.text);
  if (!node) fail(name, "unknown backward node '" + name.text + "'");
  return node->schema;
}

// `key=value ...` to the end of the line: the node's saved fields (stored in
// schema order whatever the text's order), need= and origin= (last).
void Parser::parse_keywords(Instr& instr, const NodeSchema* schema) {
  std::set<std::string> given;
  while (at(TokenKind::Word)) {
    const Token key = take();
    const bool is_origin = key.text == "origin", is_need = key.text == "need" && has_need(instr.op);
    std::optional<FieldType> type;
    if (!is_origin && !is_need) {
      type = keyword_type(instr, schema, key.text);
      if (!type) fail(key, unknown_keyword(instr, key.text));
    }
    if (!given.insert(key.text).second) fail(key, "'" + key.text + "' is given twice");
    expect_symbol('=', "after '" + key.text + "'");
    if (is_origin) {
      instr.origin = expect(TokenKind::String, "a string (origin=\"FILE:LINE\")").text;
      break;  // origin ends the instruction
    }
    if (is_need) instr.need = read_need();
    else instr.attrs.push_back(Attr{key.text, read_value(*type, key.text)});
  }
  expect_line_end("after the instruction");
  text::sort_attrs(instr);
  if (has_need(instr.op) && !given.count("need")) instr.need.assign(text::default_need_size(instr).value_or(0), true);
}

std::optional<FieldType> Parser::keyword_type(const Instr& instr, const NodeSchema* schema,
                                              const std::string& key) const {
  if (instr.op == Opcode::CopySlices && (key == "base" || key == "view")) return FieldType{FieldKind::TensorGeometry};
  if (instr.op == Opcode::CallBackward && key == "saved") return FieldType{FieldKind::TensorList};
  if (schema) {
    for (const SavedFieldSchema& field : schema->saved) {
      if (field.name == key) return field.type;
    }
  }
  return std::nullopt;
}

std::string Parser::unknown_keyword(const Instr& instr, const std::string& key) const {
  std::vector<std::string> names = text::attr_order(instr);
  if (has_need(instr.op)) names.push_back("need");
  names.push_back("origin");
  const std::string what = instr.node.empty() ? mnemonic(instr.op) : instr.node;
  return fmt::format("{} has no field '{}' (it takes {})", what, key, fmt::join(names, ", "));
}

// `aten.OP.OVERLOAD POSITIONAL, ...  KEYWORD=VALUE ... [origin="..."]`: the positional arguments in
// schema order (trailing ones that have defaults may be left out), then keyword-only arguments by name
// (those with defaults may be left out). Stored as aten_arguments() reads them (program.hpp, Instr).
void Parser::parse_aten_arguments(const Token& name, Instr& instr) {
  const AtenOpDef* op = find_aten_op(name.text);
  if (!op) fail(name, "refgrad has no ATen op '" + name.text + "' (refgrad nodes --aten lists the ones it has)");
  const std::vector<AtenArgument>& arguments = op->schema.arguments;
  std::vector<std::optional<AtenArgumentText>> given(arguments.size());
  const auto keyword_index = [&arguments](const std::string& word) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].keyword_only && arguments[i].name == word) return i;
    }
    return std::nullopt;
  };
  const auto at_keyword = [&] { return at(TokenKind::Word) && (token_.text == "origin" || keyword_index(token_.text)); };
  const auto at_end_of_line = [this] { return at(TokenKind::Newline) || at(TokenKind::End); };
  if (!at_end_of_line() && !at_keyword()) {
    std::size_t position = 0;
    do {
      if (position >= arguments.size() || arguments[position].keyword_only) {
        fail_expected(fmt::format("the end of {}'s positional arguments (it takes {})", name.text, position));
      }
      given[position] = read_aten_argument(arguments[position]);
      ++position;
    } while (accept_symbol(','));
  }
  while (at(TokenKind::Word)) {
    const Token key = take();
    expect_symbol('=', "after '" + key.text + "'");
    if (key.text == "origin") {
      instr.origin = expect(TokenKind::String, "a string (origin=\"FILE:LINE\")").text;
      break;
    }
    const std::optional<std::size_t> index = keyword_index(key.text);
    if (!index) fail(key, fmt::format("{} has no keyword-only argument '{}'", name.text, key.text));
    if (given[*index]) fail(key, "'" + key.text + "' is given twice");
    given[*index] = read_aten_argument(arguments[*index]);
  }
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const AtenArgument& argument = arguments[i];
    if (!given[i]) {
      const std::optional<FieldValue> fallback = default_value(argument);
      if (!fallback) {
        fail(name, fmt::format("{}: argument '{}' ({}) is missing, and it has no default", name.text, argument.name,
                               type_name(argument.type)));
      }
      // An absent Tensor? is the operand none.
      if (argument.is_tensor()) given[i] = AtenArgumentText{{std::nullopt}, None{}};
      else given[i] = AtenArgumentText{{}, attr_value_of(*fallback)};
    }
    instr.attrs.push_back(Attr{argument.name, given[i]->value});
    instr.operands.insert(instr.operands.end(), given[i]->operands.begin(), given[i]->operands.end());
  }
}

// One argument's text: a tensor's operand (or a number standing for it), a list of operands, or a value.
Parser::AtenArgumentText Parser::read_aten_argument(const AtenArgument& argument) {
  AtenArgumentText piece;
  if (argument.is_tensor()) {
    if (is_number(token_) || is_imaginary(token_) || is_bool(token_)) {
      piece.value = read_scalar();
    } else {
      piece.operands.push_back(read_tensor_operand(argument, argument.type.optional));
    }
  } else if (argument.is_tensor_list()) {
    read_list([&] {
      piece.operands.push_back(read_tensor_operand(argument, argument.type.kind == FieldKind::OptionalTensorList));
    });
    piece.value = static_cast<std::int64_t>(piece.operands.size());
  } else {
    piece.value = read_value(argument.type, argument.name);
  }
  return piece;
}

std::optional<std::string> Parser::read_tensor_operand(const AtenArgument& argument, bool none_allowed) {
  if (at(TokenKind::Register)) return take().text;
  if (at(TokenKind::Saved)) return "$" + take().text;
  if (none_allowed && at_word("none")) {
    take();
    return std::nullopt;
  }
  fail_expected(fmt::format("a register '%NAME' or a saved tensor '$NAME'{} for '{}' ({})",
                            none_allowed ? ", or none," : "", argument.name, type_name(argument.type)));
}

// ----------------------------------------------------------------- values ---

std::vector<std::optional<std::string>> Parser::read_results() {
  std::vector<std::optional<std::string>> results;
  do {
    if (at_word("_")) {
      take();
      results.push_back(std::nullopt);
    } else {
      results.push_back(expect(TokenKind::Register, "a result '%NAME' or '_'").text);
    }
  } while (accept_symbol(','));
  return results;
}

// G, ...: registers or none; the list may be empty.
std::vector<std::optional<std::string>> Parser::read_operands() {
  std::vector<std::optional<std::string>> operands;
  if (!at(TokenKind::Register) && !at_word("none")) return operands;
  do {
    if (at_word("none")) {
      take();
      operands.push_back(std::nullopt);
    } else {
      operands.push_back(expect(TokenKind::Register, "a register '%NAME' or none").text);
    }
  } while (accept_symbol(','));
  return operands;
}

std::int64_t Parser::read_integer() {
  const Token token = expect(TokenKind::Integer, "an integer");
  std::int64_t value = 0;
  const char* end = token.text.data() + token.text.size();
  const auto [stop, error] = std::from_chars(token.text.data(), end, value);
  if (error != std::errc() || stop != end) fail(token, "integer " + token.text + " does not fit in int64");
  return value;
}

// A number read as Float (float or double): an integer is accepted, and
// rounded once, from the decimal text (from_chars is correctly rounded).
template <class Float>
Float Parser::read_float(DType dtype) {
  if (!is_number(token_)) fail_expected("a number");
  const Token token = take();
  return float_of<Float>(token, token.text, dtype);
}

// The value of a number's spelling (a Float or Integer token's text, or an
// Imaginary's without its j): nan, inf and their signs included.
template <class Float>
Float Parser::float_of(const Token& token, const std::string& spelling_with_sign, DType dtype) {
  const std::string spelling =
      spelling_with_sign[0] == '+' ? spelling_with_sign.substr(1) : spelling_with_sign;  // from_chars takes no '+'
  const bool negative = spelling[0] == '-';
  const std::string_view magnitude = std::string_view(spelling).substr(negative ? 1 : 0);
  const Float sign = negative ? -1 : 1;
  if (magnitude == "nan") return std::copysign(std::numeric_limits<Float>::quiet_NaN(), sign);
  if (magnitude == "inf") return std::copysign(std::numeric_limits<Float>::infinity(), sign);
  Float value = 0;
  const char* end = spelling.data() + spelling.size();
  const auto [stop, error] = std::from_chars(spelling.data(), end, value);
  if (error != std::errc() || stop != end) {
    fail(token, fmt::format("{} is out of range for {}", spelling, short_dtype_name(dtype)));
  }
  return value;
}

template <class Float>
Float Parser::read_imaginary(DType dtype) {
  if (!is_imaginary(token_)) fail_expected("an imaginary part such as 2j");
  const Token token = take();
  return float_of<Float>(token, token.text.substr(0, token.text.size() - 1), dtype);  // without the j
}

bool Parser::read_bool() {
  if (!is_bool(token_)) fail_expected("true or false");
  return take().text == "true";
}

// The spelling is the kind: 2 is an int Scalar, 2.0 a float one, true a bool
// one, and 1.5-2.0j or 0.5j (Python's spelling) a complex one.
Scalar Parser::read_scalar() {
  if (is_bool(token_)) return Scalar(read_bool());
  if (is_imaginary(token_)) return Scalar(std::complex<double>(0.0, read_imaginary<double>(DType::ComplexDouble)));
  const Scalar real_part = at(TokenKind::Integer) ? Scalar(read_integer()) : Scalar(read_float<double>(DType::Float64));
  const bool signed_imaginary = is_imaginary(token_) && (token_.text[0] == '+' || token_.text[0] == '-');
  if (!signed_imaginary) return real_part;
  return Scalar(std::complex<double>(real_part.to_double(), read_imaginary<double>(DType::ComplexDouble)));
}

DType Parser::read_dtype() {
  const Token token = expect(TokenKind::Word, "a dtype (b8, i64, f32, f64, f16, bf16, ...)");
  const std::optional<DType> dtype = parse_short_dtype(token.text);
  if (!dtype)
    fail(token, "unknown dtype '" + token.text + "' (b8, u8, i8, i16, i32, i64, u16, u32, u64, f16, bf16, f32, f64, "
                "c32, c64 or c128)");
  return *dtype;
}

Device Parser::read_device() {
  const Token token = expect(TokenKind::Word, "a device (cpu, cuda)");
  const std::optional<Device> device = text::parse_device(token.text);
  if (!device) fail(token, "unknown device '" + token.text + "' (cpu or cuda)");
  return *device;
}

Layout Parser::read_layout() {
  const Token token = expect(TokenKind::Word, "a layout");
  const std::optional<Layout> layout = text::parse_layout(token.text);
  if (!layout) {
    fail(token, "unknown layout '" + token.text +
                    "' (strided, sparse_coo, sparse_csr, mkldnn, sparse_csc, sparse_bsr, sparse_bsc or jagged)");
  }
  return *layout;
}

template <class ReadItem>
void Parser::read_list(ReadItem read_item) {
  expect_symbol('[', "to open a list");
  if (accept_symbol(']')) return;
  do {
    read_item();
  } while (accept_symbol(','));
  if (!accept_symbol(']')) fail_expected("',' or ']'");
}

IntList Parser::read_int_list() {
  IntList values;
  read_list([&] { values.push_back(read_integer()); });
  return values;
}

Shape Parser::read_sizes() {
  Shape sizes;
  read_list([&] {
    const Token token = token_;
    sizes.push_back(read_integer());
    if (sizes.back() < 0) fail(token, "a size must not be negative");
  });
  return sizes;
}

std::vector<bool> Parser::read_need() {
  std::vector<bool> need;
  read_list([&] {
    if (!at(TokenKind::Integer) || (token_.text != "0" && token_.text != "1")) fail_expected("a need bit, 0 or 1");
    need.push_back(take().text == "1");
  });
  return need;
}

// f32[4,5], i64[] cuda
TensorType Parser::read_type() {
  TensorType type;
  type.dtype = read_dtype();
  type.sizes = read_sizes();
  if (at(TokenKind::Word)) type.device = read_device();
  return type;
}

// {key=value, ...}: read_part(key) reads the value after "key=".
template <class ReadPart>
void Parser::read_record(std::string_view what, const std::vector<RecordKey>& keys, ReadPart read_part) {
  expect_symbol('{', fmt::format("to open {}", what));
  std::set<std::string> given;
  auto find_key = [&keys](const std::string& name) {
    return std::find_if(keys.begin(), keys.end(), [&name](const RecordKey& key) { return key.name == name; });
  };
  if (!at_symbol('}')) {
    do {
      const Token key = expect(TokenKind::Word, fmt::format("a part of {}", what));
      const auto known = find_key(key.text);
      if (known == keys.end()) {
        std::vector<std::string_view> names;
        for (const RecordKey& k : keys) names.push_back(k.name);
        fail(key, fmt::format("{} has no part '{}' (its parts: {})", what, key.text, fmt::join(names, ", ")));
      }
      if (!given.insert(key.text).second) fail(key, fmt::format("'{}' is given twice", key.text));
      if (!known->flag) expect_symbol('=', fmt::format("after '{}'", key.text));
      read_part(key.text);
    } while (accept_symbol(','));
  }
  const Token close = token_;
  if (!accept_symbol('}')) fail_expected("',' or '}'");
  for (const RecordKey& key : keys) {
    if (key.required && !given.count(std::string(key.name))) {
      fail(close, fmt::format("{} needs its part '{}'", what, key.name));
    }
  }
}

// f32[4,3], f32[3]{grad_dtype=f64}, f32[3]{device=cuda, subclass}, or _ (no metadata).
std::optional<InputMetadata> Parser::read_metadata() {
  if (at_word("_")) {
    take();
    return std::nullopt;
  }
  InputMetadata metadata;
  metadata.dtype = read_dtype();
  metadata.shape = read_sizes();
  metadata.grad_dtype = metadata.dtype;
  if (!at_symbol('{')) return metadata;
  read_record("edge metadata", {{"device"}, {"grad_dtype"}, {"subclass", false, true}}, [&](const std::string& key) {
    if (key == "device") metadata.device = read_device();
    if (key == "subclass") metadata.is_tensor_subclass = true;
    if (key == "grad_dtype") {
      if (at_word("none")) {
        take();
        metadata.grad_dtype = std::nullopt;
      } else {
        metadata.grad_dtype = read_dtype();
      }
    }
  });
  return metadata;
}

std::vector<std::optional<InputMetadata>> Parser::read_metadata_list() {
  std::vector<std::optional<InputMetadata>> metadata;
  if (at_line_end() || at_word("origin")) return metadata;  // a validate of no edges
  do {
    metadata.push_back(read_metadata());
  } while (accept_symbol(','));
  return metadata;
}

TensorOptions Parser::read_options() {
  TensorOptions options;
  read_record("TensorOptions", {{"dtype"}, {"device"}, {"layout"}, {"requires_grad"}}, [&](const std::string& key) {
    if (key == "dtype") options.dtype = read_dtype();
    if (key == "device") options.device = read_device();
    if (key == "layout") options.layout = read_layout();
    if (key == "requires_grad") options.requires_grad = read_bool();
  });
  return options;
}

TensorGeometry Parser::read_geometry() {
  TensorGeometry geometry;
  read_record("TensorGeometry", {{"sizes", true}, {"strides", true}, {"storage_offset", true}},
              [&](const std::string& key) {
                if (key == "sizes") geometry.sizes = read_int_list();
                if (key == "strides") geometry.strides = read_int_list();
                if (key == "storage_offset") geometry.storage_offset = read_integer();
              });
  return geometry;
}

TypeAndSize Parser::read_type_and_size() {
  TypeAndSize info;
  read_record("TypeAndSize", {{"sizes", true}, {"options", true}}, [&](const std::string& key) {
    if (key == "sizes") info.sizes = read_int_list();
    if (key == "options") info.options = read_options();
  });
  return info;
}

// A field's value, read as its kind says (docs/program.md, "Field values by kind").
AttrValue Parser::read_value(FieldType type, const std::string& field) {
  // An unsaved tensor is none even where the field is not optional (MulBackward0's
  // `other` when self needs no grad).
  if (at_word("none") && (type.optional || type.kind == FieldKind::Tensor)) {
    take();
    return None{};
  }
  if (!starts_value(type.kind, token_)) {
    fail_expected(fmt::format("{} for '{}' ({})", value_noun(type.kind), field, type_name(type)));
  }
  switch (type.kind) {
    case FieldKind::Tensor: return SavedRef{read_name(TokenKind::Saved)};
    case FieldKind::TensorList: {
      std::vector<SavedRef> refs;
      read_list([&] { refs.push_back(SavedRef{read_name(TokenKind::Saved)}); });
      return refs;
    }
    case FieldKind::OptionalTensorList: {
      std::vector<std::optional<SavedRef>> refs;
      read_list([&] {
        if (at_word("none")) {
          take();
          refs.push_back(std::nullopt);
        } else {
          refs.push_back(SavedRef{read_name(TokenKind::Saved)});
        }
      });
      return refs;
    }
    case FieldKind::Int: return read_integer();
    case FieldKind::IntList:
    case FieldKind::Sizes: return read_int_list();
    case FieldKind::Float: return read_float<double>(DType::Float64);
    case FieldKind::Bool: return read_bool();
    case FieldKind::Scalar: return read_scalar();
    case FieldKind::String: return take().text;
    case FieldKind::DType: return read_dtype();
    case FieldKind::Layout: return read_layout();
    case FieldKind::TensorOptions: return read_options();
    case FieldKind::TensorGeometry: return read_geometry();
    case FieldKind::TypeAndSize: return read_type_and_size();
    case FieldKind::DTypeList: {
      std::vector<DType> dtypes;
      read_list([&] { dtypes.push_back(read_dtype()); });
      return dtypes;
    }
    case FieldKind::SizesList: {
      std::vector<IntList> lists;
      read_list([&] { lists.push_back(read_int_list()); });
      return lists;
    }
    case FieldKind::BoolList: {
      std::vector<bool> bools;
      read_list([&] { bools.push_back(read_bool()); });
      return bools;
    }
    case FieldKind::Device: return read_device();
    case FieldKind::MemoryFormat: {
      const Token token = take();
      const std::optional<MemoryFormat> format = text::parse_memory_format(token.text);
      if (!format) {
        fail(token, "unknown memory format '" + token.text +
                        "' (contiguous_format, preserve_format, channels_last or channels_last_3d)");
      }
      return *format;
    }
  }
  fail_expected("a value");
}

// -------------------------------------------------------- tensor literals ---

Tensor Parser::read_literal(const TensorType& type) {
  const Token start = token_;
  switch (type.dtype) {
    case DType::Bool: return read_literal_as<bool>(type);
    case DType::Int64: return read_literal_as<std::int64_t>(type);
    case DType::Float32: return read_literal_as<float>(type);
    case DType::Float64: return read_literal_as<double>(type);
    case DType::Float16:
    case DType::BFloat16: return to(read_literal_as<float>(type), type.dtype);  // rounded to nearest, as torch.tensor
    case DType::ComplexHalf:  // each part rounded to nearest, as torch.tensor
      return to(read_literal_as<std::complex<float>>(type), DType::ComplexHalf);
    case DType::ComplexFloat: return read_literal_as<std::complex<float>>(type);
    case DType::ComplexDouble: return read_literal_as<std::complex<double>>(type);
    default: {  // the other integer types: written as integers that must fit
      const Tensor wide = read_literal_as<std::int64_t>(type);
      const Tensor narrow = to(wide, type.dtype);
      if (!equal(to(narrow, DType::Int64), wide))
        fail(start, "an element of the literal does not fit " + short_dtype_name(type.dtype));
      return narrow;
    }
  }
}

template <class T>
Tensor Parser::read_literal_as(const TensorType& type) {
  const Token start = token_;
  std::vector<T> values;
  auto read_one = [&] { values.push_back(read_element<T>(type)); };
  read_literal_block(type, 0, read_one);
  if (!strides_fit(type.sizes)) fail(start, "the sizes of " + to_string(type) + " are too large for a tensor");
  return from_vector(values, type.sizes);
}

template <class T>
T Parser::read_element(const TensorType& type) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!is_bool(token_)) fail_expected("true or false (an element of " + to_string(type) + ")");
    return read_bool();
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (!at(TokenKind::Integer)) fail_expected("an integer (an element of " + to_string(type) + ")");
    return read_integer();
  } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
    // Python's spelling: 1.5-2j, -1+0j, 3j (no real part), 2 (no imaginary part), nan+infj.
    using Part = typename T::value_type;
    if (is_imaginary(token_)) return T(0, read_imaginary<Part>(type.dtype));
    if (!is_number(token_)) fail_expected("a complex number such as 1.5-2j (an element of " + to_string(type) + ")");
    const Part real_part = read_float<Part>(type.dtype);
    const bool signed_imaginary = is_imaginary(token_) && (token_.text[0] == '+' || token_.text[0] == '-');
    return T(real_part, signed_imaginary ? read_imaginary<Part>(type.dtype) : Part(0));
  } else {
    if (!is_number(token_)) fail_expected("a number (an element of " + to_string(type) + ")");
    return read_float<T>(type.dtype);
  }
}

// One block of a literal: dimension `dim` and those inside it, checked
// against the declared sizes as it is read (never allocated from them).
template <class ReadElement>
void Parser::read_literal_block(const TensorType& type, std::size_t dim, ReadElement& read_element) {
  auto mismatch = [this, &type](const Token& at, const std::string& detail) {
    fail(at, "tensor literal does not match " + to_string(type) + ": " + detail);
  };
  const auto rank = static_cast<std::int64_t>(type.sizes.size());
  if (dim == type.sizes.size()) {
    if (at_symbol('[')) mismatch(token_, fmt::format("nested deeper than its {} {}", rank, plural(rank, "dimension")));
    read_element();
    return;
  }
  if (!at_symbol('[')) {
    mismatch(token_, fmt::format("expected '[' for dimension {}, got {}", dim, text::describe(token_)));
  }
  take();
  const std::int64_t expected = type.sizes[dim];
  std::int64_t count = 0;
  if (!at_symbol(']')) {
    do {
      if (count == expected) {
        mismatch(token_, fmt::format("dimension {} has more than {} {}", dim, expected, plural(expected, "element")));
      }
      read_literal_block(type, dim + 1, read_element);
      ++count;
    } while (accept_symbol(','));
  }
  const Token close = token_;
  if (!accept_symbol(']')) fail_expected("',' or ']'");
  if (count != expected) {
    mismatch(close, fmt::format("dimension {} has {} {}, not {}", dim, count, plural(count, "element"), expected));
  }
}

}  // namespace

Program parse_program(std::string_view text, std::string_view file) { return Parser(text, file).parse(); }

}  // namespace refgrad
