// Python's string operations over UTF-8 text, as templates use them: code points for length,
// indexing and slicing; Python's whitespace for strip() and split(); repr() of str and float.
//
// Non-goal: Unicode case mapping. upper(), lower(), title() and capitalize() change ASCII
// letters only; Python also maps other scripts (a chat template applies them to role names).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace strata::jinja {

// Decodes the code point at s[i] and advances i. A byte that does not start a well-formed
// sequence decodes as itself (0x80..0xFF), one byte long: text that is not UTF-8 still has a
// length and slices back to the same bytes.
char32_t utf8_next(std::string_view s, size_t& i);
// (Encoding a code point is strata::utf8_append, core/utf8.h.)

// The value of a hexadecimal digit (either case), or -1.
int hex_value(char c);
// What the one-letter escape \b, \f, \n, \r or \t stands for (JSON and Python share them);
// 0 for any other letter.
char control_escape(char e);

// Byte offsets of every code point of s, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point (what \s, strip() and split() use).
bool is_space(char32_t c);

// str.strip(chars); with `chars` null, Python whitespace.
std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(): runs of whitespace, no empty pieces; at most `max_split` splits (-1: all).
std::vector<std::string> split_whitespace(std::string_view s, int64_t max_split);
// str.split(sep) with a non-empty separator; at most `max_split` splits (-1: all).
std::vector<std::string> split_on(std::string_view s, std::string_view sep, int64_t max_split);
// str.rsplit(sep) with a non-empty separator, from the right.
std::vector<std::string> rsplit_on(std::string_view s, std::string_view sep, int64_t max_split);
// str.splitlines(): Python's line boundaries, ends dropped.
std::vector<std::string> split_lines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
// str.capitalize(): first letter upper, the rest lower.
std::string capitalize(std::string_view s);
// jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string title(std::string_view s);

// repr() of a Python str: '...' unless the text holds ' and not ", escapes as Python.
std::string str_repr(std::string_view s);
// repr() (and str()) of a Python float: shortest round trip, "1.0", "1e-05", "1e+16", "inf".
std::string float_repr(double d);

}  // namespace strata::jinja
