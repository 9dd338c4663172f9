// Private to src/program: what the text printer and parser share — the
// spellings the text form gives to a few values, the order attributes are
// kept in, and the lexer that cuts text into tokens. docs/program.md
// ("Text syntax") is the reference for everything here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "refgrad/program.hpp"

namespace refgrad::text {

// ------------------------------------------------------------- spellings ---

std::string layout_spelling(Layout layout);  // "strided", "sparse_coo", ...
std::optional<Layout> parse_layout(std::string_view spelling);
std::optional<Device> parse_device(std::string_view spelling);  // "cpu", "cuda"
std::optional<MemoryFormat> parse_memory_format(std::string_view spelling);  // "contiguous_format", ...

// --------------------------------------------------- attributes and need ---

// The attributes an instruction takes, in the one order it keeps them in
// whatever order the text gave: CopySlices' base and view first, then the
// node's saved fields in schema order; call_backward's `saved`; none for the
// other opcodes.
std::vector<std::string> attr_order(const Instr& instr);
// Puts instr.attrs in that order. Names the order does not know (a hand-built
// program may have them) keep their order, at the end.
void sort_attrs(Instr& instr);

// The length of `need` when the text leaves it out (every bit 1): the node's
// inputs for call and CopySlices (the wrapped node's), the results for
// call_backward. nullopt for an opcode without `need`, or an unknown node.
std::optional<std::size_t> default_need_size(const Instr& instr);

// ----------------------------------------------------------------- lexer ---

// Where a token starts: byte offset, and 1-based line and column (columns
// count characters, so a UTF-8 character counts once and a tab counts once).
struct Position {
  std::size_t offset = 0;
  int line = 1;
  int column = 1;
};

enum class TokenKind : std::uint8_t {
  End,       // end of the text
  Newline,   // ends a declaration or instruction (never inside brackets)
  Word,      // program, f32, MulBackward0, none, true, nan, ...: [A-Za-z_][A-Za-z0-9_.]*
  Register,  // %name
  Saved,     // $name
  Leaf,      // @name
  Callable,  // &name
  Output,    // ^name
  Integer,   // -?[0-9]+
  Float,     // 1.0, -2.5e-3, 1e+20, -inf, -nan (bare inf and nan are Words)
  Imaginary, // 2j, -0.5j, +1e-3j, +infj, -nanj: a complex number's imaginary part (bare infj, nanj are Words)
  String,    // "..."; text holds the decoded bytes
  Symbol,    // one of , = : [ ] { }
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // a name without its sigil, a number as written, a string's value, a symbol
  Position where;
};

// The text being parsed, for error messages: every parse error goes through
// fail(), which shows the line and puts a caret under the spot.
class Source {
 public:
  Source(std::string_view text, std::string_view file) : text_(text), file_(file) {}
  std::string_view text() const { return text_; }
  const std::string& file() const { return file_; }
  // Raises refgrad::Error: "file:line:col: error: message\n  <the line>\n  <spaces>^".
  [[noreturn]] void fail(const Position& where, const std::string& message) const;

 private:
  std::string_view text_;
  std::string file_;
};

// Brackets nest at most this deep (a tensor literal of 64 dimensions), so a
// hostile text cannot make the parser recurse without bound.
inline constexpr int kMaxNesting = 64;

class Lexer {
 public:
  explicit Lexer(const Source& source) : source_(source) {}
  Token next();

 private:
  bool at_end() const { return here_.offset >= source_.text().size(); }
  char peek(std::size_t ahead = 0) const;
  char advance();
  void skip_blanks_and_comments();
  bool next_line_continues() const;
  Token read_sigil_name(TokenKind kind);
  Token read_word();
  Token read_number();
  Token read_string();
  Token read_symbol();
  char read_escape();

  const Source& source_;
  Position here_;
  int depth_ = 0;  // open [ and {: newlines inside them do not end a line
};

// "'%x'", "end of line", "'['": a token as error messages name it.
std::string describe(const Token& token);

}  // namespace refgrad::text
