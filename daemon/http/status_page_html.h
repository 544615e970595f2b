// daemon/http/status_page.html, compiled into the binary at build time
// (daemon/CMakeLists.txt) so moetierd installs as one file.
#pragma once

#include <string_view>

namespace moetier {

extern const std::string_view kStatusPageHtml;

}  // namespace moetier
