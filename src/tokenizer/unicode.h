// The tokenizer's names for the Unicode helpers, which live in src/regex (the regex front end
// below both the tokenizer and the server's JSON grammar needs the same tables).
#pragma once
#include "regex/unicode.h"

namespace deepinfer::tokenizer {

namespace unicode_tables = regex::unicode_tables;
using regex::append_utf8;
using regex::category_bit;
using regex::CategoryMask;
using regex::general_category;
using regex::GeneralCategory;
using regex::is_alphabetic;
using regex::is_regex_word;
using regex::is_rust_word;
using regex::is_valid_utf8;
using regex::is_white_space;
using regex::kMaskC;
using regex::kMaskL;
using regex::kMaskM;
using regex::kMaskN;
using regex::kMaskP;
using regex::kMaskS;
using regex::kMaskZ;
using regex::script_ranges;
using regex::unicode_version;
using regex::utf8_lossy;
using regex::utf8_step;
using regex::Utf8Step;

}  // namespace deepinfer::tokenizer
