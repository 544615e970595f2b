// A canonical form of Jinja chat-template text, for recognising a known
// template whatever its layout: two templates with the same canonical form
// render the same prompt for every conversation.
#pragma once

#include <string>
#include <string_view>

namespace moetier {

// The template as the engine sees it once whitespace control is applied, the
// way Hugging Face's apply_chat_template (and llama.cpp's Jinja engine, which
// follows it) compiles templates: trim_blocks, lstrip_blocks, the "-"
// markers of {%- -%} {{- -}} {#- -#}, and the one trailing newline Jinja
// drops. What is left of the literal text is kept byte for byte; inside a
// tag, whitespace outside string literals is dropped and both quote styles
// become one; comments vanish. Literal text is wrapped in \x02 ... \x03 and
// string literals in \x01 ... \x01, so the parts cannot run together.
// Text that is not well-formed (an unterminated tag) yields a form no known
// template has.
std::string CanonicalTemplateText(std::string_view text);

}  // namespace moetier
