// The lexer of the text form: characters to tokens, and the one place parse
// errors are formatted. docs/program.md "Lexical rules" is what it implements.
#include <fmt/format.h>

#include "text.hpp"

namespace refgrad::text {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_name_char(char c) { return is_letter(c) || is_digit(c) || c == '.'; }
bool is_sigil(char c) { return c == '%' || c == '$' || c == '@' || c == '&' || c == '^'; }
bool is_symbol(char c) { return c == ',' || c == '=' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}'; }
// The first byte of a UTF-8 character (continuation bytes are 10xxxxxx).
bool starts_character(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }

TokenKind sigil_kind(char sigil) {
  switch (sigil) {
    case '%': return TokenKind::Register;
    case '$': return TokenKind::Saved;
    case '@': return TokenKind::Leaf;
    case '&': return TokenKind::Callable;
    default: return TokenKind::Output;
  }
}

char sigil_of(TokenKind kind) {
  switch (kind) {
    case TokenKind::Register: return '%';
    case TokenKind::Saved: return '$';
    case TokenKind::Leaf: return '@';
    case TokenKind::Callable: return '&';
    default: return '^';
  }
}

// A character as an error message shows it: 'x', or \xHH when it is not printable.
std::string show_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7F) return fmt::format("'{}'", c);
  return fmt::format("'\\x{:02x}'", byte);
}

bool all_digits(std::string_view name) {
  for (char c : name) {
    if (!is_digit(c)) return false;
  }
  return true;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// ----------------------------------------------------------------- errors ---

void Source::fail(const Position& where, const std::string& message) const {
  const std::size_t offset = std::min(where.offset, text_.size());
  std::size_t line_begin = offset;
  while (line_begin > 0 && text_[line_begin - 1] != '\n') --line_begin;
  std::size_t line_end = text_.find('\n', line_begin);
  if (line_end == std::string_view::npos) line_end = text_.size();
  std::string_view line = text_.substr(line_begin, line_end - line_begin);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // The caret's indent copies the line's tabs, so it lines up in a terminal.
  std::string indent;
  for (std::size_t i = line_begin; i < offset && i < line_end; ++i) {
    if (text_[i] == '\t') indent += '\t';
    else if (starts_character(text_[i])) indent += ' ';
  }
  throw Error(fmt::format("{}:{}:{}: error: {}\n  {}\n  {}^", file_, where.line, where.column, message, line, indent));
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::End: return "end of text";
    case TokenKind::Newline: return "end of line";
    case TokenKind::String: return "a string";
    case TokenKind::Register:
    case TokenKind::Saved:
    case TokenKind::Leaf:
    case TokenKind::Callable:
    case TokenKind::Output: return fmt::format("'{}{}'", sigil_of(token.kind), token.text);
    default: return fmt::format("'{}'", token.text);
  }
}

// ------------------------------------------------------------------ lexer ---

char Lexer::peek(std::size_t ahead) const {
  const std::size_t at = here_.offset + ahead;
  return at < source_.text().size() ? source_.text()[at] : '\0';
}

char Lexer::advance() {
  const char c = source_.text()[here_.offset++];
  if (c == '\n') {
    ++here_.line;
    here_.column = 1;
  } else if (starts_character(c)) {
    ++here_.column;
  }
  return c;
}

void Lexer::skip_blanks_and_comments() {
  while (!at_end()) {
    const char c = peek();
    if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && (depth_ > 0 || next_line_continues()))) {
      advance();
    } else if (c == '#') {
      while (!at_end() && peek() != '\n') advance();
    } else {
      return;
    }
  }
}

// A line that starts with `name=` (a field, or need=) continues the
// instruction above it, so a node with many fields can be written on several
// lines. `_ =` starts an instruction (a dropped result), so `_` is not a name here.
bool Lexer::next_line_continues() const {
  std::size_t at = here_.offset + 1;  // just after the newline
  const std::string_view text = source_.text();
  auto blank = [&](std::size_t i) { return i < text.size() && (text[i] == ' ' || text[i] == '\t'); };
  while (blank(at)) ++at;
  const std::size_t name_start = at;
  if (at >= text.size() || !is_letter(text[at])) return false;
  while (at < text.size() && is_name_char(text[at])) ++at;
  if (text.substr(name_start, at - name_start) == "_") return false;
  while (blank(at)) ++at;
  return at < text.size() && text[at] == '=';
}

Token Lexer::next() {
  skip_blanks_and_comments();
  if (at_end()) return Token{TokenKind::End, "", here_};
  const char c = peek();
  if (c == '\n') {
    Token newline{TokenKind::Newline, "", here_};
    advance();
    return newline;
  }
  if (is_sigil(c)) return read_sigil_name(sigil_kind(c));
  if (is_letter(c)) return read_word();
  if (is_digit(c) || ((c == '-' || c == '+') && (is_digit(peek(1)) || is_letter(peek(1))))) return read_number();
  if (c == '"') return read_string();
  if (is_symbol(c)) return read_symbol();
  source_.fail(here_, "unexpected character " + show_char(c));
}

// %name: letters, digits, '_' and '.', starting with a letter or '_'; or digits only.
Token Lexer::read_sigil_name(TokenKind kind) {
  Token token{kind, "", here_};
  advance();
  while (is_name_char(peek())) token.text += advance();
  if (token.text.empty()) {
    source_.fail(here_, fmt::format("expected a name after '{}', got {}", sigil_of(kind),
                                    at_end() ? std::string("end of text") : show_char(peek())));
  }
  if (!is_letter(token.text[0]) && !all_digits(token.text)) {
    source_.fail(token.where, fmt::format("bad name '{}{}': a name starts with a letter or '_', or is digits only",
                                          sigil_of(kind), token.text));
  }
  return token;
}

Token Lexer::read_word() {
  Token token{TokenKind::Word, "", here_};
  while (is_name_char(peek())) token.text += advance();
  return token;
}

// -?[0-9]+ is an Integer; with a fraction (.[0-9]*) or an exponent (e[+-]?[0-9]+)
// it is a Float; -inf and -nan are Floats too (bare inf and nan are Words).
// A number followed by j is an Imaginary (the imaginary part of a complex
// element, 1.5-2j); only it may start with '+' (1+2j), and +-inf, +-nan take
// the j too (nan+infj).
Token Lexer::read_number() {
  Token token{TokenKind::Integer, "", here_};
  if (peek() == '-' || peek() == '+') token.text += advance();
  if (is_letter(peek())) {
    while (is_name_char(peek())) token.text += advance();
    const std::string_view magnitude = std::string_view(token.text).substr(1);
    if (magnitude == "infj" || magnitude == "nanj") {
      token.kind = TokenKind::Imaginary;
    } else if (token.text == "-inf" || token.text == "-nan") {
      token.kind = TokenKind::Float;
    } else {
      source_.fail(token.where, "malformed number '" + token.text + "'");
    }
    return token;
  }
  while (is_digit(peek())) token.text += advance();
  if (peek() == '.') {
    token.kind = TokenKind::Float;
    token.text += advance();
    while (is_digit(peek())) token.text += advance();
  }
  if (peek() == 'e' || peek() == 'E') {
    token.kind = TokenKind::Float;
    token.text += advance();
    if (peek() == '+' || peek() == '-') token.text += advance();
    if (!is_digit(peek())) {
      source_.fail(token.where, "malformed number '" + token.text + "': the exponent has no digits");
    }
    while (is_digit(peek())) token.text += advance();
  }
  if (peek() == 'j' && !is_name_char(peek(1))) {
    token.text += advance();
    token.kind = TokenKind::Imaginary;
  }
  if (token.text[0] == '+' && token.kind != TokenKind::Imaginary) {
    source_.fail(token.where, "malformed number '" + token.text +
                                  "': only an imaginary part starts with '+' (a complex element such as 1+2j)");
  }
  // "12abc", "1.5.3": a number must not run into a name.
  if (is_name_char(peek())) {
    while (is_name_char(peek())) token.text += advance();
    source_.fail(token.where, "malformed number '" + token.text + "'");
  }
  return token;
}

// "..." with the escapes \\ \" \n \t \xHH. A string ends on its line: a raw
// newline inside it means the closing quote is missing.
Token Lexer::read_string() {
  Token token{TokenKind::String, "", here_};
  advance();
  while (true) {
    if (at_end() || peek() == '\n') source_.fail(token.where, "unterminated string: no closing '\"' on this line");
    const char c = peek();
    if (c == '"') break;
    if (c == '\\') {
      token.text += read_escape();
    } else if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
      source_.fail(here_, "control character " + show_char(c) + " in a string: write it as \\xHH");
    } else {
      token.text += advance();
    }
  }
  advance();
  return token;
}

char Lexer::read_escape() {
  const Position where = here_;
  advance();
  const char c = at_end() ? '\0' : peek();
  if (c == '\\' || c == '"') return advance();
  if (c == 'n' || c == 't') {
    advance();
    return c == 'n' ? '\n' : '\t';
  }
  if (c == 'x') {
    const int high = hex_value(peek(1)), low = hex_value(peek(2));
    if (high < 0 || low < 0) source_.fail(where, "bad escape in a string: \\x needs two hex digits");
    advance();
    advance();
    advance();
    return static_cast<char>(high * 16 + low);
  }
  const bool printable = c >= 0x20 && c < 0x7F;
  const std::string shown = printable ? fmt::format("'\\{}'", c) : "'\\' followed by " + show_char(c);
  source_.fail(where, "unknown escape " + shown + " in a string (known: \\\\ \\\" \\n \\t \\xHH)");
}

Token Lexer::read_symbol() {
  Token token{TokenKind::Symbol, std::string(1, peek()), here_};
  const char c = advance();
  if (c == '[' || c == '{') {
    if (++depth_ > kMaxNesting) {
      source_.fail(token.where, fmt::format("brackets nested more than {} deep", kMaxNesting));
    }
  } else if ((c == ']' || c == '}') && depth_ > 0) {
    --depth_;
  }
  return token;
}

}  // namespace refgrad::text
